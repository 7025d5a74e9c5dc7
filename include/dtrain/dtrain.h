// dtrain's library API in one include: join the job, wrap the model, pick an
// optimizer and a schedule, mixed precision, checkpoints, image data and
// tensor collectives.
// See examples/custom_loop.cc for a whole training loop.
#pragma once

#include "dtrain/amp.h"
#include "dtrain/checkpoint.h"
#include "dtrain/collectives.h"
#include "dtrain/data.h"
#include "dtrain/data_parallel.h"
#include "dtrain/init.h"
#include "dtrain/lr_schedule.h"
#include "dtrain/optim.h"
