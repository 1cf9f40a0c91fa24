// The power-method analysis: moved to analysis/power/.
#pragma once

#include "analysis/power/spectra.h"
