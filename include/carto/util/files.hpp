// carto/util/files.hpp — files read with a bound and written atomically.
//
// Design note: every file carto reads (plans, hardware profiles, training data, checkpoints) is
// opened through read_file_bounded / check_input_file, which accept only a regular file (not a
// directory, a FIFO or /dev/zero) no larger than a stated size, so a wrong path is a clear error
// and never an endless read. Every file carto writes goes through AtomicFile (or atomic_write for a
// string): bytes go to a temporary file in the target's folder, which is flushed, fsync'ed and then
// renamed over the target, and the folder is synced; on any failure the temporary is removed, the
// old file survives untouched, and the message carries the OS reason (strerror). check_output_path
// lets a tool refuse an unwritable output before it starts long work. POSIX only (Linux).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "carto/error.hpp"
#include "carto/util/units.hpp"

namespace carto {

// Stated bounds on the files carto reads.
inline constexpr std::int64_t kMaxPlanFileBytes = std::int64_t{64} << 20;     // 64 MiB
inline constexpr std::int64_t kMaxHardwareFileBytes = std::int64_t{1} << 20;  // 1 MiB
inline constexpr std::int64_t kMaxDataFileBytes = std::int64_t{1} << 30;      // 1 GiB

namespace detail {

inline std::string os_reason(int err) { return std::strerror(err); }

// The folder part of `path` ("." when it has none).
inline std::string parent_folder(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

inline void write_all(int fd, const void* data, std::size_t size, const std::string& temp,
                      std::string_view what) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("carto: cannot write the ", what, " to '", temp, "': ", os_reason(errno));
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

}  // namespace detail

// Checks that `path` names a regular file of at most `max_bytes` bytes and returns its size.
// `what` names the file for the message ("plan file", "hardware profile", ...).
inline std::int64_t check_input_file(const std::string& path, std::int64_t max_bytes,
                                     std::string_view what) {
  if (path.empty()) detail::fail("carto: the ", what, " path is empty; give the path of a file");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    detail::fail("carto: cannot read the ", what, " '", path, "': ", detail::os_reason(errno));
  }
  if (S_ISDIR(st.st_mode)) {
    detail::fail("carto: the ", what, " '", path, "' is a directory; give the path of a file");
  }
  if (!S_ISREG(st.st_mode)) {
    detail::fail("carto: the ", what, " '", path,
                 "' is not a regular file (a device, pipe or socket); give the path of a file");
  }
  if (st.st_size > max_bytes) {
    detail::fail("carto: the ", what, " '", path, "' is ", format_bytes(st.st_size), "; at most ",
                 format_bytes(max_bytes), " is accepted");
  }
  return static_cast<std::int64_t>(st.st_size);
}

// The whole content of the regular file `path`, which must be at most `max_bytes` long.
inline std::string read_file_bounded(const std::string& path, std::int64_t max_bytes,
                                     std::string_view what) {
  const std::int64_t size = check_input_file(path, max_bytes, what);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    detail::fail("carto: cannot open the ", what, " '", path, "': ", detail::os_reason(errno));
  }
  std::string out(static_cast<std::size_t>(size), '\0');
  std::size_t got = 0;
  // One byte more than the stated size is asked for, so a file that grew since stat() is noticed.
  std::string extra(1, '\0');
  while (true) {
    char* at = got < out.size() ? out.data() + got : extra.data();
    const std::size_t want = got < out.size() ? out.size() - got : 1;
    const ssize_t n = ::read(fd, at, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      detail::fail("carto: cannot read the ", what, " '", path, "': ", detail::os_reason(err));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
    if (got > out.size()) {
      ::close(fd);
      detail::fail("carto: the ", what, " '", path, "' grew while it was read; try again");
    }
  }
  ::close(fd);
  out.resize(got);
  return out;
}

// Checks, before long work starts, that `path` can be written: it is not empty, not a directory,
// and its folder exists and is writable. `what` names the output ("plan", "JSON report", ...).
inline void check_output_path(const std::string& path, std::string_view what) {
  if (path.empty()) detail::fail("carto: the ", what, " path is empty; give a file path");
  if (path.back() == '/') {
    detail::fail("carto: the ", what, " path '", path, "' names a directory; give a file path");
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      detail::fail("carto: cannot write the ", what, " to '", path,
                   "': it is a directory; give a file path");
    }
    if (!S_ISREG(st.st_mode)) {
      detail::fail("carto: cannot write the ", what, " to '", path,
                   "': it exists and is not a regular file");
    }
  }
  const std::string folder = detail::parent_folder(path);
  if (::stat(folder.c_str(), &st) != 0) {
    detail::fail("carto: cannot write the ", what, " to '", path, "': its folder '", folder,
                 "': ", detail::os_reason(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    detail::fail("carto: cannot write the ", what, " to '", path, "': '", folder,
                 "' is not a directory");
  }
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    detail::fail("carto: cannot write the ", what, " to '", path, "': its folder '", folder,
                 "': ", detail::os_reason(errno));
  }
}

// A file written atomically: the bytes go to a temporary file in the target's folder; commit()
// flushes, syncs and renames it over the target. Destroyed without commit() (an exception, an
// early return), it removes the temporary and the target keeps its old content.
class AtomicFile {
 public:
  AtomicFile(std::string path, std::string_view what) : path_(std::move(path)), what_(what) {
    check_output_path(path_, what_);
    static std::atomic<unsigned> counter{0};
    temp_ = detail::concat(path_, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0) {
      detail::fail("carto: cannot write the ", what_, " to '", path_, "': cannot create '", temp_,
                   "': ", detail::os_reason(errno));
    }
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() { discard(); }

  void write(const void* data, std::size_t size) {
    CARTO_CHECK(fd_ >= 0, "AtomicFile '", path_, "' is written after commit()");
    try {
      detail::write_all(fd_, data, size, temp_, what_);
    } catch (...) {
      discard();
      throw;
    }
  }
  void write(std::string_view text) { write(text.data(), text.size()); }

  // Syncs the temporary file, renames it over the target and syncs the folder.
  void commit() {
    CARTO_CHECK(fd_ >= 0, "AtomicFile '", path_, "' is committed twice");
    if (::fsync(fd_) != 0) fail_and_discard("syncing", errno);
    if (::close(fd_) != 0) {
      fd_ = -1;
      fail_and_discard("closing", errno);
    }
    fd_ = -1;
    if (::rename(temp_.c_str(), path_.c_str()) != 0) fail_and_discard("renaming", errno);
    temp_.clear();
    // The rename is durable once the folder is synced; a folder that cannot be opened for reading
    // (rare) still holds the renamed file, so that failure is not an error.
    const std::string folder = detail::parent_folder(path_);
    const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      (void)::fsync(dir);
      ::close(dir);
    }
  }

  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  void discard() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!temp_.empty()) ::unlink(temp_.c_str());
    temp_.clear();
  }
  [[noreturn]] void fail_and_discard(std::string_view step, int err) {
    const std::string temp = temp_;
    discard();
    detail::fail("carto: cannot write the ", what_, " to '", path_, "': ", step, " '", temp,
                 "' failed: ", detail::os_reason(err), "; the old file is unchanged");
  }

  std::string path_;
  std::string what_;
  std::string temp_;
  int fd_ = -1;
};

// Writes `bytes` to `path` atomically (see AtomicFile).
inline void atomic_write(const std::string& path, std::string_view bytes, std::string_view what) {
  AtomicFile file(path, what);
  file.write(bytes);
  file.commit();
}

}  // namespace carto
