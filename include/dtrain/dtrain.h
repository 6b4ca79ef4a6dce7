/* dtrain: distributed deep-learning training in C.  Includes every public header. */
#ifndef DTRAIN_DTRAIN_H
#define DTRAIN_DTRAIN_H

#include "dtrain/base.h"
#include "dtrain/comm.h"
#include "dtrain/store.h"
#include "dtrain/tensor.h"
#include "dtrain/nn.h"
#include "dtrain/optim.h"
#include "dtrain/mesh.h"
#include "dtrain/parallel.h"
#include "dtrain/pipeline.h"
#include "dtrain/ps.h"
#include "dtrain/layout.h"
#include "dtrain/plan.h"
#include "dtrain/data.h"
#include "dtrain/layout.h"
#include "dtrain/plan.h"
#include "dtrain/ckpt.h"
#include "dtrain/version.h" /* DTRAIN_VERSION, generated from CMakeLists.txt */

#endif
