// A core header that includes an upper layer: the layering check must name it (ctest: layering_detects_upward_include).
#pragma once

#include "analysis/samples.h"
