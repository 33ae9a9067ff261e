# Checks that a page of the docs shows source files as they are, so a compiled example and its page cannot drift:
#
# - every ```cpp block must follow a line "<!-- snippet: <path> -->" or "<!-- snippet: <path>#<name> -->" (a C++
#   block nobody compiles is an error);
# - the block after "<!-- snippet: <path> -->" must equal the file ROOT/<path>;
# - the block after "<!-- snippet: <path>#<name> -->" must equal the region <name> of that file: the lines between
#   each "snippet-begin: <name>" marker line and the next "snippet-end: <name>" line (markers are comments, "// " in
#   C++, "# " in CMake, alone on their line), every such region of the file in order, each without the indentation of
#   its begin marker and without the marker lines of other regions inside it. So a page can show a struct declared at
#   namespace scope and the statements that use it, which the compiled file keeps inside a function.
# Blocks of any language may carry a marker (a CMake block is checked the same way); other blocks are not checked.
# Whole-text string operations only (a CMake list would split C++ at its semicolons).
#
#   cmake -D DOC=docs/manifolds.md -D ROOT=<source dir> -P snippet.cmake

cmake_minimum_required(VERSION 3.21)

# read_region(<file> <name> <out>): the region <name> of <file>, as described above.
function(read_region file name out)
  file(READ "${file}" content)
  set(result "")
  set(pieces 0)
  while(TRUE)
    string(FIND "${content}" "snippet-begin: ${name}\n" begin)
    if(begin EQUAL -1)
      break()
    endif()
    # The marker's line up to the marker: indentation and a comment leader.
    string(SUBSTRING "${content}" 0 ${begin} head)
    string(FIND "${head}" "\n" line_start REVERSE)
    math(EXPR line_start "${line_start} + 1")
    math(EXPR prefix_length "${begin} - ${line_start}")
    string(SUBSTRING "${content}" ${line_start} ${prefix_length} prefix)
    if(NOT prefix MATCHES "^( *)(// |# )$")
      message(FATAL_ERROR
        "${DOC}: ${file}: the marker 'snippet-begin: ${name}' must be alone on its line, after // or #")
    endif()
    set(indent "${CMAKE_MATCH_1}")
    string(LENGTH "snippet-begin: ${name}\n" marker_length)
    math(EXPR begin "${begin} + ${marker_length}")
    string(SUBSTRING "${content}" ${begin} -1 content)
    string(FIND "${content}" "snippet-end: ${name}\n" finish)
    if(finish EQUAL -1)
      message(FATAL_ERROR "${DOC}: ${file}: 'snippet-begin: ${name}' has no 'snippet-end: ${name}'")
    endif()
    # The piece ends where the end marker's line starts.
    string(SUBSTRING "${content}" 0 ${finish} piece)
    string(FIND "${piece}" "\n" last_newline REVERSE)
    math(EXPR piece_length "${last_newline} + 1")
    string(SUBSTRING "${piece}" 0 ${piece_length} piece)
    string(SUBSTRING "${content}" ${finish} -1 content)
    # Without other regions' markers, and without the begin marker's indentation.
    string(REGEX REPLACE "\n *(//|#) snippet-(begin|end): [^\n]*" "" piece "\n${piece}")
    if(NOT indent STREQUAL "")
      string(REPLACE "\n${indent}" "\n" piece "${piece}")
    endif()
    string(SUBSTRING "${piece}" 1 -1 piece)
    string(APPEND result "${piece}")
    math(EXPR pieces "${pieces} + 1")
  endwhile()
  if(pieces EQUAL 0)
    message(FATAL_ERROR "${DOC}: ${file} has no region '${name}' (snippet-begin/snippet-end markers)")
  endif()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

file(READ "${DOC}" text)

# Every C++ block follows a marker.
set(rest "\n${text}")
while(TRUE)
  string(FIND "${rest}" "\n```cpp\n" at)
  if(at EQUAL -1)
    break()
  endif()
  string(SUBSTRING "${rest}" 0 ${at} before)
  string(FIND "${before}" "\n" line_start REVERSE)
  math(EXPR line_start "${line_start} + 1")
  string(SUBSTRING "${before}" ${line_start} -1 previous)
  if(NOT previous MATCHES "^<!-- snippet: [^ ]+ -->$")
    message(FATAL_ERROR "${DOC}: a ```cpp block that no <!-- snippet: path#name --> marker ties to a compiled file "
      "follows the line: ${previous}")
  endif()
  math(EXPR at "${at} + 8")
  string(SUBSTRING "${rest}" ${at} -1 rest)
endwhile()

set(checked 0)
while(TRUE)
  string(FIND "${text}" "<!-- snippet: " at)
  if(at EQUAL -1)
    break()
  endif()
  string(SUBSTRING "${text}" ${at} -1 text)
  string(FIND "${text}" " -->" end)
  math(EXPR path_length "${end} - 14")
  string(SUBSTRING "${text}" 14 ${path_length} path)
  # The block starts after the first "```" line that follows the marker and ends at the next line "```".
  string(FIND "${text}" "\n```" open)
  if(open EQUAL -1)
    message(FATAL_ERROR "${DOC}: no code block after <!-- snippet: ${path} -->")
  endif()
  math(EXPR open "${open} + 4")
  string(SUBSTRING "${text}" ${open} -1 text)
  string(FIND "${text}" "\n" eol)
  math(EXPR eol "${eol} + 1")
  string(SUBSTRING "${text}" ${eol} -1 text)
  string(FIND "${text}" "\n```\n" close)
  if(close EQUAL -1)
    message(FATAL_ERROR "${DOC}: the code block after <!-- snippet: ${path} --> is not closed")
  endif()
  math(EXPR close "${close} + 1")
  string(SUBSTRING "${text}" 0 ${close} block)
  string(SUBSTRING "${text}" ${close} -1 text)
  set(region "")
  string(FIND "${path}" "#" hash)
  if(NOT hash EQUAL -1)
    math(EXPR after_hash "${hash} + 1")
    string(SUBSTRING "${path}" ${after_hash} -1 region)
    string(SUBSTRING "${path}" 0 ${hash} path)
  endif()
  if(NOT EXISTS "${ROOT}/${path}")
    message(FATAL_ERROR "${DOC}: <!-- snippet: ${path} --> names a file that does not exist")
  endif()
  if(region STREQUAL "")
    file(READ "${ROOT}/${path}" expected)
  else()
    read_region("${ROOT}/${path}" "${region}" expected)
  endif()
  if(NOT block STREQUAL expected)
    file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/snippet_expected.txt" "${expected}")
    file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/snippet_found.txt" "${block}")
    message(FATAL_ERROR "${DOC}: the block after <!-- snippet: ${path}#${region} --> differs from the file "
      "(diff ${CMAKE_CURRENT_BINARY_DIR}/snippet_expected.txt ${CMAKE_CURRENT_BINARY_DIR}/snippet_found.txt)")
  endif()
  math(EXPR checked "${checked} + 1")
endwhile()
message(STATUS "${DOC}: ${checked} snippet(s) match their files, every C++ block among them")
