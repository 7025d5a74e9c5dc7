target_sources(dtrain_doctor PRIVATE gpu_checks.cc)
