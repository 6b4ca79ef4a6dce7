/* Model construction shared by the model builders (mlp, gpt, ...). */
#ifndef DT_NN_MODEL_INTERNAL_H
#define DT_NN_MODEL_INTERNAL_H

#include "dtrain/nn.h"

/* An empty model with room for `cap` layers and a fresh parameter registry. */
dt_status dt__model_new(int cap, dt_model **out);
/* Append a layer (the model takes ownership). */
void dt__model_append(dt_model *m, dt_layer *l);

#endif
