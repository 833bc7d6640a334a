// Ends the region begun by fp_exact_push.hpp (no include guard: included in pairs).
#if defined(__clang__)
#pragma float_control(pop)
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif
