# Runs inside `cmake --install` (see HaltpollInstall.cmake), where CMAKE_INSTALL_PREFIX is the
# prefix of this install: `--prefix` wins over the configured one. The files that name install
# paths (the systemd unit, haltpoll.pc) are generated here rather than at configure time so that
# they name the directories the files really went to, for any prefix. file(INSTALL) adds DESTDIR
# and records every file in install_manifest.txt.
#
# Inputs (set by the install(CODE) that includes this file): HP_SOURCE_DIR, HP_STAGING_DIR,
# HP_VERSION, HP_DESCRIPTION, HP_SHARED, HP_DAEMON, HP_SBINDIR, HP_LIBDIR, HP_INCLUDEDIR,
# HP_SYSCONFDIR, HP_UNITDIR (each as configured: relative to the prefix, or absolute).

# GNUInstallDirs' rule for an absolute directory (what CMAKE_INSTALL_FULL_<dir> is at configure
# time), applied to this install's prefix: etc/var under the prefix / or /usr are /etc and /var,
# and under /opt/<pkg> they are /etc/opt/<pkg> and /var/opt/<pkg>.
function(haltpoll_full_dir out dir)
  set(prefix "${CMAKE_INSTALL_PREFIX}")
  string(REGEX REPLACE "/+$" "" prefix "${prefix}")
  if(IS_ABSOLUTE "${dir}")
    set(full "${dir}")
  elseif(dir MATCHES "^(etc|var)(/.*)?$" AND (prefix STREQUAL "" OR prefix STREQUAL "/usr"))
    set(full "/${dir}")
  elseif(dir MATCHES "^(etc|var)(/.*)?$" AND prefix MATCHES "^/opt/(.*)$")
    set(full "/${dir}/opt/${CMAKE_MATCH_1}")
  else()
    set(full "${prefix}/${dir}")
  endif()
  set(${out} "${full}" PARENT_SCOPE)
endfunction()

haltpoll_full_dir(_hp_libdir "${HP_LIBDIR}")
haltpoll_full_dir(_hp_includedir "${HP_INCLUDEDIR}")

# haltpoll.pc names its directories through ${prefix} where they are under it, as is usual.
# A static libhaltpoll needs its own dependencies on every link line.
set(HALTPOLL_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
foreach(_hp_dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${HP_${_hp_dir}}")
    set(HALTPOLL_PC_${_hp_dir} "${HP_${_hp_dir}}")
  else()
    set(HALTPOLL_PC_${_hp_dir} "\${prefix}/${HP_${_hp_dir}}")
  endif()
endforeach()
set(HALTPOLL_PC_VERSION "${HP_VERSION}")
set(HALTPOLL_PC_DESCRIPTION "${HP_DESCRIPTION}")
if(HP_SHARED)
  set(HALTPOLL_PC_LIBS "-L\${libdir} -lhaltpoll")
  set(HALTPOLL_PC_LIBS_PRIVATE "-pthread")
else()
  set(HALTPOLL_PC_LIBS "-L\${libdir} -lhaltpoll -pthread")
  set(HALTPOLL_PC_LIBS_PRIVATE "")
endif()
configure_file("${HP_SOURCE_DIR}/cmake/haltpoll.pc.in" "${HP_STAGING_DIR}/haltpoll.pc" @ONLY)
file(INSTALL DESTINATION "${_hp_libdir}/pkgconfig" TYPE FILE FILES "${HP_STAGING_DIR}/haltpoll.pc")

if(NOT HP_DAEMON)
  return()
endif()

haltpoll_full_dir(_hp_sbindir "${HP_SBINDIR}")
haltpoll_full_dir(_hp_bindir "${HP_BINDIR}")
haltpoll_full_dir(_hp_sysconfdir "${HP_SYSCONFDIR}")
haltpoll_full_dir(_hp_unitdir "${HP_UNITDIR}")

# The same template and variable names as the build tree's unit (HaltpollInstall.cmake).
set(HALTPOLLD_SBINDIR "${_hp_sbindir}")
set(HALTPOLLD_BINDIR "${_hp_bindir}")
set(HALTPOLLD_CONFIG_FILE "${_hp_sysconfdir}/haltpolld/haltpolld.json")
configure_file("${HP_SOURCE_DIR}/systemd/haltpolld.service.in" "${HP_STAGING_DIR}/haltpolld.service" @ONLY)
file(INSTALL DESTINATION "${_hp_unitdir}" TYPE FILE FILES "${HP_STAGING_DIR}/haltpolld.service")

# The sample configuration documents every key. An existing file is the administrator's: keep it.
if(EXISTS "$ENV{DESTDIR}${HALTPOLLD_CONFIG_FILE}")
  message(STATUS "Keeping: $ENV{DESTDIR}${HALTPOLLD_CONFIG_FILE} (the sample is ${HP_SOURCE_DIR}/config/haltpolld.json)")
else()
  file(INSTALL DESTINATION "${_hp_sysconfdir}/haltpolld" TYPE FILE FILES "${HP_SOURCE_DIR}/config/haltpolld.json")
endif()
