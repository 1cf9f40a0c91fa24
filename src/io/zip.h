// A minimal reader of zip archives whose entries are stored uncompressed, as torch.save writes them
// (PyTorch's zip checkpoint format, see io/torch_pickle.h), so that every entry can be used in place from
// the mapping. Also a writer of such archives, for tests and the fuzz seeds.
//
// On-disk format (PKWARE APPNOTE 6.3): local file headers, each followed by its entry's bytes; then the central
// directory (one record per entry: name, method, sizes, offset of its local header); then the end-of-central-
// directory record (EOCD, signature PK\5\6, at most 65535 bytes of comment after it). Archives over 4 GiB or
// 65535 entries use ZIP64: the EOCD fields read 0xFFFF(FFFF), a ZIP64 EOCD locator (PK\6\7) just before the
// EOCD gives the offset of the ZIP64 EOCD record (PK\6\6), and each central record whose size or offset reads
// 0xFFFFFFFF carries the full value in its ZIP64 extra field (id 0x0001). The sizes of the central record are
// authoritative: torch's writer sets the data-descriptor flag and leaves zeros in the local header.
//
// Validation before any entry is used: the EOCD found, one disk only, the central directory inside the file,
// every record complete, every local header inside the file with the expected signature, every entry's bytes
// inside the file and before the central directory, no duplicate names. Compressed or encrypted entries are
// refused when they are opened (`data`), naming the entry and its method.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/mapped_file.h"

namespace tdyn {

struct ZipEntry {
  std::string name;
  uint16_t method = 0;        // 0 = stored; anything else is refused by ZipArchive::data
  uint16_t flags = 0;         // bit 0: encrypted
  uint64_t data_offset = 0;   // of the entry's bytes in the file (after the local header)
  uint64_t size = 0;          // compressed size = bytes in the file
  uint64_t uncompressed = 0;  // size once inflated (equals `size` for a stored entry)
};

class ZipArchive {
 public:
  // Reads the central directory of `file`; errors name file->path().
  explicit ZipArchive(std::shared_ptr<const MappedFile> file);

  const std::vector<ZipEntry>& entries() const { return entries_; }  // in central-directory order
  const ZipEntry* find(const std::string& name) const;
  // The entry's bytes in place; throws Error for a compressed or encrypted entry.
  std::string_view data(const ZipEntry& entry) const;
  const std::shared_ptr<const MappedFile>& file() const { return file_; }

 private:
  std::shared_ptr<const MappedFile> file_;
  std::vector<ZipEntry> entries_;
  std::map<std::string, size_t> by_name_;
};

// True when the file starts like a zip archive (a local file header, PK\3\4).
bool looks_like_zip(std::string_view head);

// An archive of stored entries in the given order, each entry's bytes starting at a multiple of 64 as
// torch.save aligns them (padding in the local header's extra field). `zip64` writes ZIP64 records and extra
// fields even when the sizes would fit, so that the ZIP64 path can be tested without 4 GiB of data.
std::string write_zip_stored(const std::vector<std::pair<std::string, std::string>>& entries, bool zip64 = false);

}  // namespace tdyn
