# Warning and sanitizer flags as an INTERFACE target that every project target links
# privately; nothing is set globally, so a consumer embedding the project is not affected.
add_library(haltpoll_build_options INTERFACE)
target_compile_options(haltpoll_build_options INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Wimplicit-fallthrough)
if(HALTPOLL_WERROR)
  target_compile_options(haltpoll_build_options INTERFACE -Werror)
endif()
if(HALTPOLL_SANITIZE)
  list(JOIN HALTPOLL_SANITIZE "," _hp_san)
  target_compile_options(haltpoll_build_options INTERFACE -fsanitize=${_hp_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(haltpoll_build_options INTERFACE -fsanitize=${_hp_san})
endif()
