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
  if("thread" IN_LIST HALTPOLL_SANITIZE)
    # TSan does not model std::atomic_thread_fence; GCC warns wherever one is inlined (Asio
    # included). Our own fence-based code switches to seq_cst operations under __SANITIZE_THREAD__.
    target_compile_options(haltpoll_build_options INTERFACE -Wno-tsan)
  endif()
endif()
