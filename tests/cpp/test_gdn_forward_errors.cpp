// Error paths of the GDN forward ops: every bad argument raises fuseops::Error naming the op and the argument.
#include "gdn_forward_test_util.h"
