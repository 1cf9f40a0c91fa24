// The power-method paper's tests across layers: moved to analysis/power/layers.h.
#pragma once

#include "analysis/power/layers.h"
