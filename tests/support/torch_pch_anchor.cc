// Anchors the precompiled header the libtorch layers' tests share
// (tests/CMakeLists.txt: dtrain_test_torch_pch); an empty program.
int main() { return 0; }
