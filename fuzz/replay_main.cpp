// fuzz/replay_main.cpp
// Replays inputs through a fuzz target's LLVMFuzzerTestOneInput without libFuzzer, so the
// corpus and every reproducer (fuzz/regressions/<target>/) run as ordinary ctest tests in
// the normal build, with any compiler (fuzz/CMakeLists.txt: fuzz_replay_<target>).
// Usage: fuzz_replay_<target> PATH...   (a file, or a directory: its regular files, sorted)
// Prints each input before running it, so a crash names the file; a broken property aborts
// (fuzz/fuzz_input.hpp). Exits 1 when a path is missing or no input was found.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

std::vector<std::uint8_t> read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path path = argv[i];
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(path))
        if (entry.is_regular_file()) files.push_back(entry.path());
      std::sort(files.begin(), files.end());
      inputs.insert(inputs.end(), files.begin(), files.end());
    } else if (fs::is_regular_file(path, ec)) {
      inputs.push_back(path);
    } else {
      std::fprintf(stderr, "replay: no such file or directory: %s\n", path.string().c_str());
      return 1;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs\n");
    return 1;
  }
  for (const fs::path& path : inputs) {
    const std::vector<std::uint8_t> bytes = read_all(path);
    std::printf("replay %s (%zu bytes)\n", path.string().c_str(), bytes.size());
    std::fflush(stdout);
    // libFuzzer never passes a null pointer; an empty vector's data() may be one
    static const std::uint8_t empty = 0;
    (void)LLVMFuzzerTestOneInput(bytes.empty() ? &empty : bytes.data(), bytes.size());
  }
  std::printf("replay: %zu inputs passed\n", inputs.size());
  return 0;
}
