// Profile: everything that defines an experiment (workload, strategy, hyperparameters,
// run options), its JSON form, and its validation. The same resolved profile is what the
// launcher hands each worker, so GUI, headless runner and workers read one format.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ptw::core {

/// Example: ModelSpec{}.kind = "mlp"; hidden = {64, 64};
struct ModelSpec {
  std::string kind = "linear";  ///< linear | mlp
  std::int64_t inFeatures = 10;
  std::int64_t outFeatures = 1;
  std::vector<std::int64_t> hidden = {};  ///< mlp only: hidden layer widths
  std::string activation = "relu";        ///< mlp only: relu | tanh | gelu
};

/// Example: DataSpec{}.samples = 1000;
struct DataSpec {
  std::string kind = "synthetic-regression";  ///< synthetic-regression | synthetic-classification
  std::int64_t samples = 100;
  std::uint64_t seed = 0;
  double noise = 0.1;
};

/// Example: StrategySpec{}.ranks = 4;
struct StrategySpec {
  std::string kind = "ddp";      ///< single | ddp
  int ranks = 2;                 ///< processes (ddp) or 1 (single)
  std::string backend = "gloo";  ///< gloo | nccl | shm (same-machine CPU ranks, shared memory)
  std::string device = "cpu";    ///< cpu | cuda
  double bucketMb = 25.0;        ///< gradient bucket size for ddp
};

/// Example: HyperSpec{}.lr = 0.05;
struct HyperSpec {
  double lr = 0.01;
  std::int64_t batchSize = 16;  ///< per rank
  std::int64_t maxSteps = 20;   ///< 0: run `epochs` epochs instead
  std::int64_t epochs = 0;
  std::string optimizer = "sgd";  ///< sgd | adam
  double momentum = 0.0;
  double weightDecay = 0.0;
  std::uint64_t seed = 0;
  bool shuffle = true;
  bool dropLast = false;
};

/// Example: RunOptions{}.timeoutS = 30;
struct RunOptions {
  double timeoutS = 120.0;     ///< a rank silent this long is reported stalled
  int threadsPerRank = 1;      ///< intra-op threads per worker process
  int port = 0;                ///< store port; 0 picks a free one
};

struct Profile {
  std::string name = "untitled";
  ModelSpec model;
  DataSpec data;
  StrategySpec strategy;
  HyperSpec hyper;
  RunOptions run;

  bool operator==(const Profile& other) const;
  bool operator!=(const Profile& other) const { return !(*this == other); }
};

/// One problem with one field, e.g. {"hyper.lr", "must be > 0, got -1"}.
struct FieldError {
  std::string path;
  std::string message;
  std::string text() const { return path + ": " + message; }
};

/// Every field error of a structurally valid profile; empty when it can run.
std::vector<FieldError> validate(const Profile& profile);

/// Parses JSON text. Throws ptw::Error naming the line and column of a syntax error, or
/// the field (`strategy.ranks: expected an integer, got "two"`) of a type error, an
/// unknown field, or the first validation error. `origin` (a file name) prefixes messages.
Profile parseProfile(const std::string& jsonText, const std::string& origin = "profile");

/// Reads and parses a file; errors name the file.
Profile loadProfile(const std::string& path);

/// Pretty JSON with every field written.
std::string toJson(const Profile& profile);

/// Writes atomically (temporary file then rename), so a failed save loses nothing.
void saveProfile(const Profile& profile, const std::string& path);

/// Applies `key=value` overrides (`hyper.lr=0.01`, `strategy.ranks=4`) to a profile and
/// revalidates it. The value is read as JSON when it parses as JSON, else as a string.
Profile applyOverrides(const Profile& profile, const std::vector<std::string>& assignments);

/// The built-in default profile: the seed workload, DDP, 2 CPU ranks.
Profile defaultProfile();

}  // namespace ptw::core
