# cmake -DIN=FILE -DOUT=FILE.c -DNAME=symbol -P embed.cmake: FILE's bytes as
# `const char NAME[]` (NUL-terminated), so that a tool serves a page that
# stays an ordinary file in the tree (tools/dtrun/dashboard.html).
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}.tmp" "/* generated from ${IN} by cmake/embed.cmake */\nconst char ${NAME}[] = {\n${bytes}0x00};\n")
file(RENAME "${OUT}.tmp" "${OUT}")
