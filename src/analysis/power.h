// The power-method analysis, all of analysis/power/ (run.h runs it from start to end).
#pragma once

#include "analysis/power/iteration.h"
#include "analysis/power/spectra.h"
#include "analysis/power/steering.h"
#include "analysis/power/token_dynamics.h"
