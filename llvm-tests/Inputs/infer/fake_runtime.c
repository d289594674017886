/* A library that claims to be a model runtime of another ABI version. */
unsigned programl_runtime_abi_version(void) { return 99; }
