// expect: a Mesh has at most 3 axes
#include <carto/spec.hpp>
using namespace carto;
#ifdef CARTO_MISUSE
using M = Mesh<Axis<"a", 2>, Axis<"b", 2>, Axis<"c", 2>, Axis<"d", 2>>;
#else
using M = Mesh<Axis<"a", 2>, Axis<"b", 2>, Axis<"c", 2>>;
#endif
static_assert(M::num_devices > 0);
int main() { return 0; }
