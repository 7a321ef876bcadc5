// Beast's compiled part, built once for weft_actors (BOOST_BEAST_SEPARATE_COMPILATION): each
// gateway file then compiles only the declarations, which matters on small build machines.
#include <boost/beast/src.hpp>
