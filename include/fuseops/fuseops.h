// fuseops: fused operators for LLM training and inference. Umbrella header.
#pragma once

#include "fuseops/activation.h"
#include "fuseops/error.h"
#include "fuseops/gdn.h"
#include "fuseops/moe.h"
#include "fuseops/rope.h"
#include "fuseops/gdn_forward.h"
#include "fuseops/norm.h"
#include "fuseops/tensor.h"
#include "fuseops/version.h"
