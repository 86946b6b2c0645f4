# Runs carto-demo for one CTest case: `cmake -DDEMO=<exe> -DCASE=<case> -DWORK=<dir> -P run_demo.cmake`.
#   report         a short run on 2 thread ranks passes; its --json report parses and has the plan,
#                  a loss per step, measured and predicted memory per rank and step time
#   bad-data       an unreadable --data path: exit code 2 and a line naming it
#   mesh-mismatch  a plan saved for mesh 2 loaded with --mesh 4: exit code 2 and a line naming both
#   budget         a budget no plan meets: exit code 2 and a line stating the least memory needed
#   bf16           a short run with --dtype bf16 on 2 thread ranks: planned and trained in mixed
#                  bf16 (the plan line says so, the report's plan has precision mixed_bf16), with
#                  finite losses and the memory table
#   llama          a 20-step --arch llama run on 2 thread ranks: the loss falls (the mean of the
#                  last 10 steps at least 0.2 below that of the first 10), the report says llama with its
#                  kv_heads and ffn_hidden, and its saved plan reloads with --plan and is refused
#                  by a GPT run of the same sizes (another model name)
#   llama-flags    --arch llama with --dropout 0.1, --kv-heads 3 (not dividing --heads 4), and
#                  --kv-heads with --arch gpt: exit code 2 and a line naming the flag
# The model is tiny and the meshes 1-D, so each case takes seconds.
set(tiny --layers 1 --hidden 32 --heads 2 --seq 16 --batch 8 --sample 16)

function(run_demo)
  execute_process(COMMAND ${DEMO} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 240)
  set(rc "${rc}" PARENT_SCOPE)
  set(out "${out}" PARENT_SCOPE)
  set(err "${err}" PARENT_SCOPE)
endfunction()

# Expects exit code 2 and one stderr line matching `pattern`.
function(expect_usage_error pattern)
  run_demo(${ARGN})
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "expected exit code 2, got '${rc}'\nstdout:\n${out}\nstderr:\n${err}")
  endif()
  if(NOT err MATCHES "^carto-demo: ${pattern}[^\n]*\n$")
    message(FATAL_ERROR "expected one line 'carto-demo: ${pattern}...' on stderr, got:\n${err}")
  endif()
  message(STATUS "exit code 2: ${err}")
endfunction()

# Fails unless the JSON member at the path exists; returns it in `var`.
function(json_get var json)
  string(JSON value ERROR_VARIABLE error GET "${json}" ${ARGN})
  if(error)
    message(FATAL_ERROR "the --json report lacks ${ARGN}: ${error}")
  endif()
  set(${var} "${value}" PARENT_SCOPE)
endfunction()

file(MAKE_DIRECTORY ${WORK})
if(CASE STREQUAL "report")
  set(steps 3)
  run_demo(${tiny} --mesh 2 --steps ${steps} --json ${WORK}/report.json)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the short run failed (exit code ${rc}):\n${out}\n${err}")
  endif()
  foreach(line "step +3/3  loss [0-9.]+" "peak memory per rank" "step time: measured" "samples \\(")
    if(NOT out MATCHES "${line}")
      message(FATAL_ERROR "the output lacks '${line}':\n${out}")
    endif()
  endforeach()
  file(READ ${WORK}/report.json report)
  json_get(format "${report}" format)
  if(NOT format STREQUAL "carto-demo-report/1")
    message(FATAL_ERROR "the report's format is '${format}'")
  endif()
  json_get(plan_format "${report}" plan format)
  json_get(axes "${report}" plan mesh)
  json_get(ops "${report}" plan ops)
  json_get(losses "${report}" training losses)
  string(JSON n LENGTH "${report}" training losses)
  if(NOT n EQUAL steps)
    message(FATAL_ERROR "the report has ${n} losses for ${steps} steps")
  endif()
  json_get(first "${report}" training losses 0)
  json_get(last "${report}" training losses 2)
  string(JSON ranks LENGTH "${report}" memory ranks)
  if(NOT ranks EQUAL 2)
    message(FATAL_ERROR "the report has memory for ${ranks} ranks; the mesh has 2")
  endif()
  foreach(r RANGE 1)
    json_get(measured "${report}" memory ranks ${r} measured_peak_bytes)
    json_get(predicted "${report}" memory ranks ${r} predicted_peak_bytes)
    if(measured LESS_EQUAL 0 OR predicted LESS_EQUAL 0)
      message(FATAL_ERROR "rank ${r}: measured ${measured}, predicted ${predicted} bytes")
    endif()
  endforeach()
  json_get(t_predicted "${report}" step_time predicted_s)
  json_get(t_measured "${report}" step_time measured_s)
  message(STATUS "losses ${first} -> ${last}; rank 1 peak ${measured} B measured, ${predicted} B "
                 "predicted; step ${t_measured} s measured, ${t_predicted} s predicted")
elseif(CASE STREQUAL "bf16")
  run_demo(${tiny} --mesh 2 --steps 2 --dtype bf16 --json ${WORK}/report.json)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the bf16 run failed (exit code ${rc}):\n${out}\n${err}")
  endif()
  foreach(line "plan: mesh [^\n]*mixed bf16" "step +2/2  loss [0-9.]+" "peak memory per rank"
               "fp32 staging of bf16 operands")
    if(NOT out MATCHES "${line}")
      message(FATAL_ERROR "the output lacks '${line}':\n${out}")
    endif()
  endforeach()
  file(READ ${WORK}/report.json report)
  json_get(precision "${report}" plan precision)
  if(NOT precision STREQUAL "mixed_bf16")
    message(FATAL_ERROR "the report's plan has precision '${precision}'")
  endif()
  json_get(last "${report}" training losses 1)
  json_get(measured "${report}" memory ranks 0 measured_peak_bytes)
  json_get(predicted "${report}" memory ranks 0 predicted_peak_bytes)
  message(STATUS "bf16: last loss ${last}; rank 0 peak ${measured} B measured, ${predicted} B "
                 "predicted")
elseif(CASE STREQUAL "llama")
  set(llama_args --arch llama --layers 2 --hidden 32 --heads 4 --kv-heads 2 --seq 32 --batch 8)
  run_demo(${llama_args} --mesh 2 --steps 20 --sample 50 --json ${WORK}/report.json
           --save-plan ${WORK}/plan.json)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the llama run failed (exit code ${rc}):\n${out}\n${err}")
  endif()
  foreach(line "model: char-llama layers=2 hidden=32 heads=4 kv_heads=2 ffn=88 " "step +20/20  loss"
               "peak memory per rank" "samples \\(")
    if(NOT out MATCHES "${line}")
      message(FATAL_ERROR "the output lacks '${line}':\n${out}")
    endif()
  endforeach()
  if(NOT out MATCHES "mean of the first 10 steps ([0-9.]+), of the last 10 ([0-9.]+)")
    message(FATAL_ERROR "the output lacks the loss summary:\n${out}")
  endif()
  set(first "${CMAKE_MATCH_1}")
  set(last "${CMAKE_MATCH_2}")
  # In thousandths (printed with 3 decimals): the last 10 steps' mean 0.2 or more below the first's.
  string(REPLACE "." "" first_milli "${first}")
  string(REPLACE "." "" last_milli "${last}")
  math(EXPR fall "${first_milli} - ${last_milli}")
  if(fall LESS 200)
    message(FATAL_ERROR "the loss did not fall by 0.2: mean ${first} over the first 10 steps, "
                        "${last} over the last 10:\n${out}")
  endif()
  file(READ ${WORK}/report.json report)
  json_get(arch "${report}" model architecture)
  json_get(kv_heads "${report}" model kv_heads)
  json_get(ffn "${report}" model ffn_hidden)
  if(NOT arch STREQUAL "llama" OR NOT kv_heads EQUAL 2 OR NOT ffn EQUAL 88)
    message(FATAL_ERROR "the report's model is ${arch}, kv_heads ${kv_heads}, ffn ${ffn}")
  endif()
  run_demo(${llama_args} --mesh 2 --steps 1 --sample 0 --plan ${WORK}/plan.json)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "loaded from ${WORK}/plan.json")
    message(FATAL_ERROR "reloading the llama plan failed (exit code ${rc}):\n${out}\n${err}")
  endif()
  expect_usage_error("the --plan file '[^']*' is for model 'char-llama layers=2 hidden=32 heads=4 kv_heads=2 ffn=88 "
                     --layers 2 --hidden 32 --heads 4 --seq 32 --batch 8 --mesh 2 --steps 1
                     --plan ${WORK}/plan.json)
  message(STATUS "llama: loss mean ${first} over the first 10 steps -> ${last} over the last 10")
elseif(CASE STREQUAL "llama-flags")
  set(llama_args --arch llama --layers 1 --hidden 32 --heads 4 --seq 16 --batch 8 --mesh 2 --steps 1)
  expect_usage_error("--dropout 0.1 does not apply to --arch llama" ${llama_args} --dropout 0.1)
  expect_usage_error("model 'char-llama': kv_heads \\(3\\) must divide heads \\(4\\)[^\n]*--kv-heads"
                     ${llama_args} --kv-heads 3)
  expect_usage_error("--kv-heads applies to --arch llama only" ${tiny} --mesh 2 --steps 1
                     --kv-heads 1)
elseif(CASE STREQUAL "bad-data")
  expect_usage_error("cannot read --data '${WORK}/no-such-file'" ${tiny} --mesh 2 --steps 1
                     --data ${WORK}/no-such-file)
elseif(CASE STREQUAL "mesh-mismatch")
  run_demo(${tiny} --mesh 2 --steps 1 --save-plan ${WORK}/plan-mesh2.json)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "saving a plan for mesh 2 failed (exit code ${rc}):\n${out}\n${err}")
  endif()
  expect_usage_error("the --plan file '[^']*' is for mesh {x:2} but --mesh is {x:4}; run with --mesh 2"
                     ${tiny} --mesh 4 --steps 1 --plan ${WORK}/plan-mesh2.json)
elseif(CASE STREQUAL "budget")
  expect_usage_error("no plan fits the memory budget of 1.00 KiB per rank on mesh {x:2}; the least memory any plan needs is"
                     ${tiny} --mesh 2 --steps 1 --budget 1KiB)
else()
  message(FATAL_ERROR "unknown CASE '${CASE}'")
endif()
