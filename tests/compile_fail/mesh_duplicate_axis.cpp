// expect: two axes of this Mesh have the same name
#include <carto/spec.hpp>
using namespace carto;
#ifdef CARTO_MISUSE
using M = Mesh<Axis<"dp", 2>, Axis<"dp", 4>>;
#else
using M = Mesh<Axis<"dp", 2>, Axis<"tp", 4>>;
#endif
static_assert(M::num_devices == 8);
int main() { return 0; }
