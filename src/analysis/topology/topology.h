// The model-independent core of the activation-graph topology analysis (SPEC §3 "Topology"), in order of use:
// streaming correlation → signed sparse graph → signed Leiden CPM communities → boundary nodes → coupling
// statistics. Models and Jacobians stay outside: callers hand over activations and per-node gains.
#pragma once

#include "analysis/topology/boundary.h"
#include "analysis/topology/correlation.h"
#include "analysis/topology/graph.h"
#include "analysis/topology/leiden.h"
#include "analysis/topology/statistics.h"
