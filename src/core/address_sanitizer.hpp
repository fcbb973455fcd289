#pragma once
// ATTNLAB_ASAN: defined when this file is compiled under AddressSanitizer. GCC defines
// __SANITIZE_ADDRESS__; clang (the sanitized build's compiler) answers __has_feature only.
#if defined(__SANITIZE_ADDRESS__)
#define ATTNLAB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNLAB_ASAN 1
#endif
#endif
