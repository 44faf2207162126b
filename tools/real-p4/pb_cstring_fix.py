#!/usr/bin/env python3
"""Make protobuf 3.21 generated C++ headers accept p4c's `cstring`.

p4c (1.2.5.x) is written against protobuf 25, whose string setters take an
absl::string_view, so p4c passes its `cstring` (implicitly convertible to
std::string_view only) straight to them.  protobuf 3.21's generated setters
take std::string / const char*, so those calls do not compile.  This rewrites
generated .pb.h files in place (idempotent):

* singular string/bytes setters `set_x(ArgT0&&, ...)`: the argument goes
  through nfc_pb_compat::str(), which turns any class type convertible to
  std::string_view (other than std::string) into a std::string and forwards
  everything else unchanged;
* repeated string/bytes fields: adds template overloads
  `add_x(const S&)` / `set_x(int, const S&)` for such types.

Usage: pb_cstring_fix.py FILE.pb.h...
"""
import re
import sys

MARK = "NFC_PB_CSTRING_COMPAT"
HELPER = """
// ---- added by nfc tools/real-p4 (pb_cstring_fix.py) ----
#ifndef NFC_PB_CSTRING_COMPAT
#define NFC_PB_CSTRING_COMPAT
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
namespace nfc_pb_compat {
template <typename T>
struct is_strlike
    : std::integral_constant<
          bool, std::is_class<std::decay_t<T>>::value &&
                    !std::is_same<std::decay_t<T>, std::string>::value &&
                    std::is_convertible<const std::decay_t<T> &, std::string_view>::value> {};
template <typename T>
inline decltype(auto) str(T &&v) {
  if constexpr (is_strlike<T>::value) {
    return std::string(std::string_view(v));
  } else {
    return std::forward<T>(v);
  }
}
}  // namespace nfc_pb_compat
#endif  // NFC_PB_CSTRING_COMPAT
// ---- end of addition ----
"""

SET_RE = re.compile(r"\.(Set|SetBytes)\(\s*static_cast<ArgT0 &&>\(arg0\), args\.\.\.")
ADD_RE = re.compile(r"^(\s*)void add_(\w+)\(const (?:char|void)\* value, size_t size\);$", re.M)
SETI_RE = re.compile(r"^(\s*)void set_(\w+)\(int index, const (?:char|void)\* value, size_t size\);$", re.M)
TPL = "template <typename S, typename = std::enable_if_t<::nfc_pb_compat::is_strlike<S>::value>> "


def fix(text: str) -> str:
    anchor = "// @@protoc_insertion_point(includes)"
    if anchor not in text:
        return text
    if MARK not in text:
        text = text.replace(anchor, HELPER + anchor, 1)
    # (oneof members are generated as `.Set( static_cast<...`, with a space)
    text = SET_RE.sub(r".\1(::nfc_pb_compat::str(static_cast<ArgT0 &&>(arg0)), args...", text)

    def add(m):
        name = m.group(2)
        line = m.group(1) + TPL + (f"void add_{name}(const S& value) "
                                   f"{{ add_{name}(std::string(std::string_view(value))); }}")
        return m.group(0) if line in text else m.group(0) + "\n" + line

    def seti(m):
        name = m.group(2)
        line = m.group(1) + TPL + (f"void set_{name}(int index, const S& value) "
                                   f"{{ set_{name}(index, std::string(std::string_view(value))); }}")
        return m.group(0) if line in text else m.group(0) + "\n" + line

    text = ADD_RE.sub(add, text)
    text = SETI_RE.sub(seti, text)
    return text


def main(paths):
    for p in paths:
        with open(p, encoding="utf-8") as f:
            old = f.read()
        new = fix(old)
        if new != old:
            with open(p, "w", encoding="utf-8") as f:
                f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
