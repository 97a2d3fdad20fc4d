#include "errors.h"

#include <cstring>

#include <fmt/format.h>

namespace tprobe {

system_error system_error_from_errno(const std::string &verb, const std::string &object, int errnum) {
  return system_error(fmt::format("unable to {} {}: {}", verb, object, std::strerror(errnum)));
}

}  // namespace tprobe
