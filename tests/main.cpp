// The one Catch2 main of carto's test executables.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
