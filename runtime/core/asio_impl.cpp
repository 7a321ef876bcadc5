// Asio's implementation, compiled once for the whole project (BOOST_ASIO_SEPARATE_COMPILATION
// is defined for every target that links weft_runtime), which keeps every other translation
// unit that includes Asio fast to build.
#include <boost/asio/impl/src.hpp>
