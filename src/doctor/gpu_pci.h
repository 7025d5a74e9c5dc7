// NVIDIA GPUs as the PCI bus sees them, without the driver (doctor/): a
// node whose driver or NVML is broken still lists its GPUs under
// /sys/bus/pci/devices, so doctor can tell "no GPU here" from "GPUs here
// that nothing can use".
#pragma once

#include <string>
#include <vector>

#include "common/system_root.h"

namespace dtrain::doctor {

// The sysfs addresses ("0000:3b:00.0"), sorted, of the devices under
// /sys/bus/pci/devices whose vendor is 0x10de (NVIDIA) and whose class is a
// display controller (0x03xxxx: VGA 0x0300, 3D 0x0302): the GPUs, not their
// audio or USB functions, nor NVSwitches (bridges, 0x0680).
std::vector<std::string> nvidiaGpusOnPciBus(const SystemRoot& root);

// "0000:19:00.0, 0000:3b:00.0".
std::string joinAddresses(const std::vector<std::string>& addresses);

}  // namespace dtrain::doctor
