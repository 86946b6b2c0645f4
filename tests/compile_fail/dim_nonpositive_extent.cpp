// expect: a static Dim extent must be positive
#include <carto/spec.hpp>
using namespace carto;
#ifdef CARTO_MISUSE
using S = Shape<Dim<"batch", 0>>;
#else
using S = Shape<Dim<"batch", 4>>;
#endif
static_assert(S::rank == 1 && S::static_value().numel() > 0);
int main() { return 0; }
