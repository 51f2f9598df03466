# git_commit.cmake (cmake -DSOURCE_DIR=DIR -DOUT=FILE -P): writes FILE with
# `#define HGRN_GIT_COMMIT "<12 hex digits>[-dirty]"` for the checkout at DIR
# ("-dirty": tracked files differ from the commit), or "unknown" when DIR is
# not a git checkout or git is missing. Run at every build; FILE is rewritten
# only when its text changes, so only a new commit recompiles build_info.c.
set(commit unknown)
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} rev-parse --short=12 HEAD
                  OUTPUT_VARIABLE head RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND head MATCHES "^[0-9a-f]+$")
    set(commit ${head})
    execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} status --porcelain --untracked-files=no
                    OUTPUT_VARIABLE changed RESULT_VARIABLE rc ERROR_QUIET)
    if(rc EQUAL 0 AND NOT changed STREQUAL "")
      set(commit ${commit}-dirty)
    endif()
  endif()
endif()
set(text "/* written by cmake/git_commit.cmake at build time */\n#define HGRN_GIT_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
