// Force-included when mlx-c is compiled with a standard library that lacks
// std::format (GCC 12's libstdc++). mlx-c uses it only to build error messages
// from "{}" placeholders, so sequential substitution through a stream is enough.
#ifndef KIVI_STD_FORMAT_HPP
#define KIVI_STD_FORMAT_HPP

#include <version>

#ifndef __cpp_lib_format
#include <sstream>
#include <string>
#include <string_view>

namespace std {
template <class... Args>
string format(string_view fmt, Args&&... args) {
  ostringstream out;
  auto emit = [&](auto&& value) {
    auto open = fmt.find("{}");
    if (open == string_view::npos) {
      return;
    }
    out << fmt.substr(0, open) << value;
    fmt.remove_prefix(open + 2);
  };
  (emit(std::forward<Args>(args)), ...);
  out << fmt;
  return out.str();
}
} // namespace std
#endif

#endif
