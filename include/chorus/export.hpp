// Symbol visibility for libchorus: the library is built with hidden
// visibility, and only what is marked CHORUS_API is part of its ABI.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define CHORUS_API __attribute__((visibility("default")))
#else
#define CHORUS_API
#endif
