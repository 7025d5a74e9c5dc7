#!/usr/bin/env python3
"""Host time per NVML call on GPU 0, through ctypes on libnvidia-ml.so.1
(no Python NVML package needed): which reads make up the exporter's
collection cost. Prints microseconds per call, median of 200 calls."""
import ctypes, statistics, time

nvml = ctypes.CDLL("libnvidia-ml.so.1")
assert nvml.nvmlInit_v2() == 0
dev = ctypes.c_void_p()
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0
buf = (ctypes.c_ubyte * 4096)()
u = ctypes.c_uint()
ull = ctypes.c_ulonglong()
u2, u3, u4 = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()


class FieldValue(ctypes.Structure):
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", ctypes.c_ulonglong)]


fields = (FieldValue * 3)()
for f, (fid, scope) in zip(fields, [(140, 0), (138, 0xFFFFFFFF), (139, 0xFFFFFFFF)]):
    f.fieldId, f.scopeId = fid, scope
calls = {
    "utilization": lambda: nvml.nvmlDeviceGetUtilizationRates(dev, buf),
    "memory": lambda: nvml.nvmlDeviceGetMemoryInfo(dev, buf),
    "temperature": lambda: nvml.nvmlDeviceGetTemperature(dev, 0, ctypes.byref(u)),
    "power": lambda: nvml.nvmlDeviceGetPowerUsage(dev, ctypes.byref(u)),
    "energy": lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(dev, ctypes.byref(ull)),
    "sm clock": lambda: nvml.nvmlDeviceGetClockInfo(dev, 1, ctypes.byref(u)),
    "mem clock": lambda: nvml.nvmlDeviceGetClockInfo(dev, 2, ctypes.byref(u)),
    "clock event reasons": lambda: nvml.nvmlDeviceGetCurrentClocksThrottleReasons(dev, ctypes.byref(ull)),
    "pcie replays": lambda: nvml.nvmlDeviceGetPcieReplayCounter(dev, ctypes.byref(u)),
    "ecc volatile uncorrected": lambda: nvml.nvmlDeviceGetTotalEccErrors(dev, 1, 0, ctypes.byref(ull)),
    "remapped rows": lambda: nvml.nvmlDeviceGetRemappedRows(dev, ctypes.byref(u), ctypes.byref(u2),
                                                            ctypes.byref(u3), ctypes.byref(u4)),
    "field values (mem temp, nvlink tx/rx)": lambda: nvml.nvmlDeviceGetFieldValues(dev, 3, fields),
}
for name, call in calls.items():
    times = []
    for _ in range(200):
        t = time.perf_counter()
        rc = call()
        times.append((time.perf_counter() - t) * 1e6)
    print(f"{name:40s} {statistics.median(times):9.1f} us  (rc {rc})")
