#include <chorus/version.hpp>

namespace chorus {

const char* version_string() noexcept { return CHORUS_VERSION_STRING; }

}  // namespace chorus
