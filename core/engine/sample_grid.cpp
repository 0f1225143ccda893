// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/sample_grid.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <png.h>

#include "common/error.h"
#include "engine/workload.h"

namespace ptw::engine {

torch::Tensor sampleGrid(const Dataset& data, const core::DataSpec& spec, const SampleGridOptions& options) {
  torch::NoGradGuard noGrad;
  const auto& shape = data.sampleShape;
  PTW_CHECK(shape.size() == 3, "sample images: the data is not images (", data.x.size(1),
            " features per sample); only image data (cifar10, image-folder, npy [n, C, H, W]) has samples to show");
  PTW_CHECK(options.count_ >= 1 && options.columns_ >= 1, "sample images: expected count and columns >= 1, got ",
            options.count_, " and ", options.columns_);
  const std::int64_t n = data.size(), count = std::min<std::int64_t>(options.count_, n);
  const std::int64_t C = shape[0], H = shape[1], W = shape[2];
  PTW_CHECK(
      spec.mean.empty() || (static_cast<std::int64_t>(spec.mean.size()) == C && spec.std.size() == spec.mean.size()),
      "data.mean, data.std: ", spec.mean.size(), " and ", spec.std.size(), " value(s) for images with ", C,
      " channel(s); give one per channel");
  std::vector<std::int64_t> picks;
  for (std::int64_t i = 0; i < count; ++i) picks.push_back(i * n / count);
  auto batch = data.x.index_select(0, torch::tensor(picks, torch::kInt64));
  if (augments(spec)) batch = augmentImages(batch, shape, spec, augmentSeed(options.seed_, 0, 0, 0));
  auto images = batch.view({count, C, H, W}).clone();
  if (!spec.mean.empty())  // undoes the loader's (x - mean) / std, channel by channel
    for (std::int64_t c = 0; c < C; ++c)
      images.select(1, c).mul_(spec.std[static_cast<std::size_t>(c)]).add_(spec.mean[static_cast<std::size_t>(c)]);
  images.clamp_(0, 1);
  const std::int64_t columns = std::min<std::int64_t>(options.columns_, count);
  const std::int64_t rows = (count + columns - 1) / columns;
  auto grid = torch::ones({C, rows * (H + 1) - 1, columns * (W + 1) - 1}, torch::kFloat32);
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t y = (i / columns) * (H + 1), x = (i % columns) * (W + 1);
    grid.narrow(1, y, H).narrow(2, x, W).copy_(images[i]);
  }
  return grid;
}

void writePng(const torch::Tensor& image, const std::string& path) {
  PTW_CHECK(image.dim() == 3 && image.size(0) >= 1, "sample images: expected [C, H, W], got ", image.sizes());
  const std::int64_t C = image.size(0), H = image.size(1), W = image.size(2);
  const int channels = C == 3 ? 3 : 1;
  // [H, W, channels] bytes, each the nearest to x·255.
  auto hwc = image.narrow(0, 0, channels)
                 .clamp(0, 1)
                 .mul(255)
                 .add(0.5)
                 .floor()
                 .to(torch::kUInt8)
                 .permute({1, 2, 0})
                 .contiguous();
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(W);
  png.height = static_cast<png_uint_32>(H);
  png.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  const bool ok = png_image_write_to_file(&png, path.c_str(), 0, hwc.data_ptr<std::uint8_t>(), 0, nullptr) != 0;
  const std::string message = ok ? "" : png.message;
  png_image_free(&png);
  PTW_CHECK(ok, "sample images: cannot write \"", path, "\": ", message);
}

}  // namespace ptw::engine
