// expect: Partial<...> may appear once, as the last argument of Spec
#include <carto/spec.hpp>
using namespace carto;
#ifdef CARTO_MISUSE
using S = Spec<Partial<"tp">, Shard<"dp">>;
#else
using S = Spec<Shard<"dp">, Partial<"tp">>;
#endif
static_assert(S::rank == 1 && S::value().is_partial());
int main() { return 0; }
