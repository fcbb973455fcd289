#pragma once
// The engine behind the bench's peer interface (bench/peers/peers.hpp), in one element type:
// `attnlab bench` times it against the peers as one more implementation.
#include <memory>
#include <string>

#include "peers/peers.hpp"

namespace attnlab::cli {

// The engine in `dtype` (f32, bf16 or f16) on `threads` threads; inputs and outputs are float32
// arrays whatever the type.
std::unique_ptr<bench::Peer> make_engine_peer(const bench::PeerShape& s, int threads, const std::string& dtype);

}  // namespace attnlab::cli
