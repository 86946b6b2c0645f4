# Installs the configured carto build into a scratch prefix, then configures, builds and runs the
# consumer project against it with find_package(carto): the spec program (carto::core) and the
# README's training program (carto::cpu), which must train. Prints "carto consumer: ok" on success.
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${CARTO_BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "installing carto into ${WORK_DIR}/prefix failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/build
                        -G ${CMAKE_GENERATOR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
                        -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
                        -DCARTO_README_TRAIN=${README_TRAIN}
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer project failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer project failed (${rc})")
endif()
execute_process(COMMAND ${WORK_DIR}/build/consumer RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the consumer program failed (${rc})")
endif()
execute_process(COMMAND ${WORK_DIR}/build/consumer_train RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the README's training program, built against the installed carto, failed "
                      "(${rc}): its loss did not halve")
endif()
message("carto consumer: ok")
