// attention_hopper.cpp: attention.cpp's harness built as a Hopper target (sm_90a's code paths:
// wgmma products, the TMA-fed forward), with emu.h's emulation of them.
//     attention_hopper DIR bf16
#define __CUDA_ARCH_FEAT_SM90_ALL 1
#include "attention.cpp"
