# `dtrain slurm conf`: this node's slurm.conf and gres.conf lines.
target_sources(dtrain_doctor PRIVATE slurm_node.cc)
