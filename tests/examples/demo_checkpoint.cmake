# carto-demo's checkpoints: `cmake -DDEMO=<exe> -DWORK=<dir> -P demo_checkpoint.cmake`.
# A 6-step run, and the same run stopped after 3 steps (--checkpoint, --save-every) and resumed
# (--resume): the resumed steps' losses are those of the uninterrupted run, digit for digit (the
# --json report writes 17 significant digits, so equal text is equal doubles). The checkpoint loads
# into another mesh (resharded) and trains on; --save-every without --checkpoint, a --resume that
# is not a checkpoint and a --checkpoint onto a plain file are one-line errors with exit code 2.
set(tiny --layers 1 --hidden 32 --heads 2 --seq 16 --batch 8 --sample 0 --dropout 0.1)

function(run_demo)
  execute_process(COMMAND ${DEMO} ${tiny} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 240)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "carto-demo ${ARGN} failed (exit code ${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

function(expect_error pattern)
  execute_process(COMMAND ${DEMO} ${tiny} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 240)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "^carto-demo: [^\n]*${pattern}[^\n]*\n$")
    message(FATAL_ERROR "expected exit code 2 and one line matching '${pattern}', got ${rc}:\n"
                        "${err}")
  endif()
  message(STATUS "exit code 2: ${err}")
endfunction()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
run_demo(--mesh 2 --steps 6 --json ${WORK}/whole.json)
run_demo(--mesh 2 --steps 3 --save-every 2 --checkpoint ${WORK}/ckpt)
foreach(line "checkpoint of step 2 saved" "checkpoint of step 3 saved")
  if(NOT out MATCHES "${line}")
    message(FATAL_ERROR "the output lacks '${line}':\n${out}")
  endif()
endforeach()
run_demo(--mesh 2 --steps 6 --resume ${WORK}/ckpt --json ${WORK}/resumed.json)
if(NOT out MATCHES "resumed from [^\n]* at step 3")
  message(FATAL_ERROR "the resumed run does not say where it resumed:\n${out}")
endif()
file(READ ${WORK}/whole.json whole)
file(READ ${WORK}/resumed.json resumed)
string(JSON n LENGTH "${resumed}" training losses)
if(NOT n EQUAL 3)
  message(FATAL_ERROR "the resumed run has ${n} losses; expected 3 (steps 4-6)")
endif()
foreach(i 0 1 2)
  math(EXPR j "${i} + 3")  # 0-based: steps 4-6
  math(EXPR step "${j} + 1")
  string(JSON want GET "${whole}" training losses ${j})
  string(JSON got GET "${resumed}" training losses ${i})
  if(NOT got STREQUAL want)
    message(FATAL_ERROR "step ${step}: the resumed run's loss ${got} is not the uninterrupted ${want}")
  endif()
  message(STATUS "step ${step}: loss ${got} in both runs")
endforeach()
run_demo(--mesh 4 --steps 5 --resume ${WORK}/ckpt)  # another mesh: resharded on load
if(NOT out MATCHES "step +5/5  loss [0-9.]+")
  message(FATAL_ERROR "the run resumed on mesh 4 did not train:\n${out}")
endif()
expect_error("--save-every needs --checkpoint" --steps 2 --save-every 1)
expect_error("not a checkpoint folder" --steps 2 --resume ${WORK}/whole.json)
expect_error("not a checkpoint folder" --steps 2 --checkpoint ${WORK}/whole.json)
