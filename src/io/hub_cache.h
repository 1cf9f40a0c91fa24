// Checkpoints in a Hugging Face hub cache: models--ORG--NAME/{refs/<revision>, snapshots/<commit>/, blobs/}.
//
// The cache keeps one snapshot directory per downloaded commit; its files are symlinks into blobs/, and
// refs/<revision> (main, a branch such as OLMo's stage1-step1000-tokens4B or Pythia's step1000) holds the commit a
// revision names. A MODEL argument may therefore be
//   DIR@REVISION   a cache directory and a revision: a ref name, a full commit or a unique prefix of one;
//   DIR            a cache directory alone, meaning DIR@main;
//   anything else  used as it is (an ordinary model directory or file, whose name may contain '@').
#pragma once

#include <string>

#include "core/files.h"

namespace tdyn {

// True when `dir` looks like a hub cache directory of one repository (it has snapshots/ and refs/ or blobs/).
bool is_hub_cache_dir(const fs::path& dir);

// The snapshot directory that `spec` names (see above), or `spec` itself when it names no cache revision.
// Errors name the cache, the revision and the revisions it does have; a snapshot file whose link points at a
// missing blob (an interrupted download) is an error too, naming both.
fs::path resolve_checkpoint(const std::string& spec);

}  // namespace tdyn
