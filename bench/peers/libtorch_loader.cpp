// Opens the LibTorch peer module (libattnlab_torch_peer.so, see
// libtorch_attention.cpp) on demand. Looked for beside the executable (build
// tree), then in ../<libdir>/attnlab/ (installed), or at $ATTNLAB_TORCH_PEER.
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "peers/peers.hpp"

namespace attnlab::bench {

std::unique_ptr<Peer> make_libtorch_peer(const PeerShape& shape, int threads, std::string* why, bool bf16) {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("ATTNLAB_TORCH_PEER")) candidates.emplace_back(env);
  std::error_code ec;
  const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  if (!ec) {
    candidates.push_back(exe_dir / "libattnlab_torch_peer.so");
    candidates.push_back(exe_dir / ".." / ATTNLAB_INSTALL_LIBDIR / "attnlab" / "libattnlab_torch_peer.so");
  }
  std::string errors;
  for (const auto& path : candidates) {
    if (!fs::exists(path, ec)) continue;
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // never closed: the peer's code lives there
    if (handle == nullptr) {
      errors += std::string("; ") + dlerror();
      continue;
    }
    using Make = Peer* (*)(const PeerShape*, int, int);
    auto make = reinterpret_cast<Make>(dlsym(handle, "attnlab_make_libtorch_peer"));
    if (make == nullptr) {
      errors += "; " + path.string() + " has no attnlab_make_libtorch_peer";
      continue;
    }
    return std::unique_ptr<Peer>(make(&shape, threads, bf16 ? 1 : 0));
  }
  if (why)
    *why = "the LibTorch peer module libattnlab_torch_peer.so was not found (attnlab built without libtorch-dev?)" +
           errors;
  return nullptr;
}

}  // namespace attnlab::bench
