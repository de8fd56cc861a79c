/* Every decoder header of the block decoder interface (block.h), for code that instantiates a
 * template per type of BLOCK_TYPES and so needs every <type>_decode32 in sight: the CUDA kernels
 * (kernels/cuda/matmul.cu). A new type adds its line to BLOCK_TYPES and its header here; a
 * header missing here is a compile error there (its decoder is undeclared). */
#ifndef NM_BLOCKS_ALL_H
#define NM_BLOCKS_ALL_H

#include "block.h"
#include "iq1_m.h"
#include "iq1_s.h"
#include "iq2_s.h"
#include "iq2_xs.h"
#include "iq2_xxs.h"
#include "iq3_s.h"
#include "iq3_xxs.h"
#include "iq4_nl.h"
#include "iq4_xs.h"
#include "q2_k.h"
#include "q3_k.h"
#include "q5_0.h"
#include "q5_1.h"

#endif
