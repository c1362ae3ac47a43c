// rattention_hopper.cpp: rattention.cpp's harness built as a Hopper target (sm_90a's code paths:
// the walks on wgmma), with emu.h's emulation of them.
//     rattention_hopper DIR bf16
#define __CUDA_ARCH_FEAT_SM90_ALL 1
#include "rattention.cpp"
