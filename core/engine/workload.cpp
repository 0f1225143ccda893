// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/workload.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <jpeglib.h>
#include <png.h>

#include "common/data_files.h"
#include "common/data_kinds.h"
#include "common/error.h"
#include "common/npy.h"
#include "engine/compat.h"
#include "engine/model.h"

namespace ptw::engine {
namespace {

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r");
  auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Numeric CSV with a header row; features and target picked by column name.
void loadCsv(const core::DataSpec& spec, Dataset& d) {
  std::ifstream in(spec.path);
  PTW_CHECK(in, "data.path: cannot open \"", spec.path, "\" (", std::strerror(errno), ")");
  std::string line;
  PTW_CHECK(std::getline(in, line), "data.path: \"", spec.path, "\" is empty; expected a header row of column names");
  auto header = core::splitCsvLine(line);
  std::map<std::string, std::size_t> column;
  for (std::size_t i = 0; i < header.size(); ++i) column[header[i]] = i;
  auto find = [&](const std::string& name, const char* field) {
    auto it = column.find(name);
    PTW_CHECK(it != column.end(), core::missingColumnMessage(field, name, spec.path, header));
    return it->second;
  };
  const std::size_t target = find(spec.target, "data.target");
  std::vector<std::size_t> features;
  if (spec.features.empty()) {
    for (std::size_t i = 0; i < header.size(); ++i)
      if (i != target) features.push_back(i);
  } else {
    for (const auto& f : spec.features) features.push_back(find(f, "data.features"));
  }
  PTW_CHECK(!features.empty(), "data.features: \"", spec.path, "\" has no column besides the target");

  std::vector<float> xs, ys;
  std::int64_t rows = 0;
  for (std::int64_t lineNo = 2; std::getline(in, line); ++lineNo) {
    if (trim(line).empty()) continue;
    if (spec.samples > 0 && rows == spec.samples) break;
    auto cells = core::splitCsvLine(line);
    PTW_CHECK(cells.size() == header.size(), "data.path: \"", spec.path, "\" line ", lineNo, ": ", cells.size(),
              " cells, expected ", header.size(), " (one per header column)");
    auto number = [&](std::size_t c) {
      const std::string& cell = cells[c];
      char* end = nullptr;
      errno = 0;
      double v = std::strtod(cell.c_str(), &end);
      PTW_CHECK(!cell.empty() && end == cell.c_str() + cell.size() && errno == 0 && std::isfinite(v), "data.path: \"",
                spec.path, "\" line ", lineNo, ", column \"", header[c], "\": expected a number, got \"", cell, "\"");
      return v;
    };
    for (auto c : features) xs.push_back(static_cast<float>(number(c)));
    double t = number(target);
    if (spec.task == "classification")
      PTW_CHECK(t >= 0 && std::floor(t) == t, "data.path: \"", spec.path, "\" line ", lineNo, ", column \"",
                header[target], "\": a class label must be an integer >= 0, got ", cells[target]);
    ys.push_back(static_cast<float>(t));
    ++rows;
  }
  PTW_CHECK(rows > 0, "data.path: \"", spec.path, "\" has a header but no data rows");
  const auto nf = static_cast<std::int64_t>(features.size());
  d.x = torch::from_blob(xs.data(), {rows, nf}, torch::kFloat32).clone();
  auto y = torch::from_blob(ys.data(), {rows}, torch::kFloat32).clone();
  d.classification = spec.task == "classification";
  d.y = d.classification ? y.to(torch::kInt64) : y.unsqueeze(1);
}

std::uint32_t bigEndian32(const unsigned char* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | p[3];
}

std::vector<unsigned char> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PTW_CHECK(in, "data.path: cannot open \"", path, "\" (", std::strerror(errno),
            "); an mnist folder holds train-images-idx3-ubyte and train-labels-idx1-ubyte");
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

// The IDX format of the MNIST files: a big-endian magic (0x00000800 | dims), the sizes, the bytes.
void loadMnist(const core::DataSpec& spec, Dataset& d) {
  const std::string imagesPath = spec.path + "/train-images-idx3-ubyte";
  const std::string labelsPath = spec.path + "/train-labels-idx1-ubyte";
  auto images = readFile(imagesPath), labels = readFile(labelsPath);
  PTW_CHECK(images.size() >= 16 && bigEndian32(images.data()) == 0x803, "data.path: \"", imagesPath,
            "\": bad magic number, expected 0x00000803 (IDX unsigned-byte images, 3 dimensions)");
  PTW_CHECK(labels.size() >= 8 && bigEndian32(labels.data()) == 0x801, "data.path: \"", labelsPath,
            "\": bad magic number, expected 0x00000801 (IDX unsigned-byte labels, 1 dimension)");
  const std::int64_t n = bigEndian32(images.data() + 4), rows = bigEndian32(images.data() + 8),
                     cols = bigEndian32(images.data() + 12), nLabels = bigEndian32(labels.data() + 4);
  PTW_CHECK(rows == 28 && cols == 28, "data.path: \"", imagesPath, "\": images are ", rows, "×", cols,
            ", expected 28×28");
  PTW_CHECK(n == nLabels, "data.path: ", n, " images but ", nLabels, " labels");
  const auto need = static_cast<std::size_t>(16 + n * 784);
  PTW_CHECK(images.size() >= need, "data.path: \"", imagesPath, "\" is truncated: ", n, " images need ", need,
            " bytes, the file has ", images.size());
  PTW_CHECK(labels.size() >= static_cast<std::size_t>(8 + n), "data.path: \"", labelsPath, "\" is truncated: ", n,
            " labels need ", 8 + n, " bytes, the file has ", labels.size());
  const std::int64_t use = spec.samples > 0 ? std::min(spec.samples, n) : n;
  auto x = torch::from_blob(images.data() + 16, {use, 784}, torch::kUInt8).to(torch::kFloat32);
  d.x = (x / 255.0 - 0.1307) / 0.3081;  // the usual MNIST normalisation
  d.y = torch::from_blob(labels.data() + 8, {use}, torch::kUInt8).to(torch::kInt64);
  d.classification = true;
  auto maxLabel = d.y.max().item<std::int64_t>();
  PTW_CHECK(maxLabel <= 9, "data.path: \"", labelsPath, "\": label ", maxLabel, " out of range 0-9");
}

// ---- Images (cifar10, image-folder) and .npy arrays: docs/data.md ----

std::string readBytes(const std::string& path, const char* field) {
  std::ifstream in(path, std::ios::binary);
  PTW_CHECK(in, field, ": cannot open \"", path, "\" (", std::strerror(errno), ")");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// CIFAR-10 binary batches: records of 1 label byte and 3072 pixel bytes (R, G, B planes of 32×32).
void loadCifar10(const core::DataSpec& spec, Dataset& d) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::directory_iterator it(spec.path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("data_batch_", 0) == 0 && name.size() > 15 && name.substr(name.size() - 4) == ".bin")
      files.push_back(it->path().string());
  }
  PTW_CHECK(!ec, "data.path: cannot read the folder \"", spec.path, "\" (", ec.message(), ")");
  std::sort(files.begin(), files.end());
  PTW_CHECK(!files.empty(), "data.path: \"", spec.path,
            "\" holds no data_batch_*.bin; a cifar10 folder holds the binary version's batches");
  // The test batch goes last, so data.val_fraction = 1/6 holds out exactly it.
  if (fs::exists(fs::path(spec.path) / "test_batch.bin"))
    files.push_back((fs::path(spec.path) / "test_batch.bin").string());
  constexpr std::int64_t kRecord = 1 + 3 * 32 * 32;
  std::vector<std::uint8_t> pixels;
  std::vector<std::int64_t> labels;
  for (const auto& file : files) {
    const std::string bytes = readBytes(file, "data.path");
    const auto size = static_cast<std::int64_t>(bytes.size());
    PTW_CHECK(size > 0 && size % kRecord == 0, "data.path: \"", file, "\" has ", size,
              " bytes; expected a multiple of ", kRecord, " (1 label byte and 3072 pixel bytes per image)");
    for (std::int64_t at = 0; at < size; at += kRecord) {
      if (spec.samples > 0 && static_cast<std::int64_t>(labels.size()) == spec.samples) break;
      const auto label = static_cast<std::uint8_t>(bytes[static_cast<std::size_t>(at)]);
      PTW_CHECK(label <= 9, "data.path: \"", file, "\" record ", at / kRecord, ": label ", int(label),
                " out of range 0-9");
      labels.push_back(label);
      pixels.insert(pixels.end(), bytes.begin() + at + 1, bytes.begin() + at + kRecord);
    }
  }
  const auto n = static_cast<std::int64_t>(labels.size());
  d.x = torch::from_blob(pixels.data(), {n, kRecord - 1}, torch::kUInt8).to(torch::kFloat32).div_(255);
  d.y = torch::from_blob(labels.data(), {n}, torch::kInt64).clone();
  d.sampleShape = {3, 32, 32};
  d.classification = true;
}

struct Image {
  std::int64_t height = 0, width = 0, channels = 0;
  std::vector<std::uint8_t> hwc;  ///< rows of pixels, channels interleaved
};

Image decodePng(const std::string& bytes, const std::string& file) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  auto fail = [&](const char* what) {
    const std::string message = png.message;
    png_image_free(&png);
    PTW_FAIL("data.path: \"", file, "\": ", what, ": ", message, " (truncated or not a PNG?)");
  };
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size())) fail("cannot read the PNG header");
  // 8 bits a sample, the file's channels: gray (1), gray+alpha (2), RGB (3) or RGBA (4).
  png.format &= ~static_cast<png_uint_32>(PNG_FORMAT_FLAG_LINEAR | PNG_FORMAT_FLAG_COLORMAP);
  Image img;
  img.height = png.height;
  img.width = png.width;
  img.channels = PNG_IMAGE_SAMPLE_CHANNELS(png.format);
  img.hwc.resize(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, img.hwc.data(), 0, nullptr)) fail("cannot decode the PNG");
  return img;
}

// libjpeg reports errors through a callback that must not return; it longjmps back here, past
// no C++ object (Note [JPEG errors]). A warning (a truncated file decodes to gray) is an error too.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpegFail(j_common_ptr info) {
  auto* err = reinterpret_cast<JpegError*>(info->err);
  (*info->err->format_message)(info, err->message);
  std::longjmp(err->jump, 1);
}

void jpegMessage(j_common_ptr info, int level) {
  if (level < 0) jpegFail(info);  // a warning: corrupt or truncated data
}

// Note [JPEG errors]: only plain data lives in this frame between setjmp and the longjmp.
bool decodeJpegInto(const std::string& bytes, Image& img, std::vector<std::uint8_t>& out, char* message) {
  jpeg_decompress_struct info;
  JpegError err;
  info.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpegFail;
  err.mgr.emit_message = jpegMessage;
  if (setjmp(err.jump)) {
    std::memcpy(message, err.message, JMSG_LENGTH_MAX);
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&info, TRUE);
  jpeg_start_decompress(&info);
  img.height = info.output_height;
  img.width = info.output_width;
  img.channels = info.output_components;
  const std::size_t row =
      static_cast<std::size_t>(info.output_width) * static_cast<std::size_t>(info.output_components);
  out.resize(row * info.output_height);  // the caller's vector: no object of this frame is skipped
  while (info.output_scanline < info.output_height) {
    unsigned char* line = out.data() + info.output_scanline * row;
    jpeg_read_scanlines(&info, &line, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return true;
}

Image decodeJpeg(const std::string& bytes, const std::string& file) {
  Image img;
  char message[JMSG_LENGTH_MAX] = {};
  PTW_CHECK(decodeJpegInto(bytes, img, img.hwc, message), "data.path: \"", file,
            "\": cannot decode the JPEG: ", message, " (truncated or not a JPEG?)");
  return img;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Note [Every class in both splits]
// An image folder lists its images class by class, so the generic split (the last
// data.val_fraction of the samples held out) would validate on the last classes only, which
// the model never trained on, and data.samples would keep the first classes only. Both instead
// take from every class in proportion: image i of a class of n has the place (i + 0.5) / n in
// the proportional order (ties: the class order), the cap keeps that order's first
// data.samples, and the held-out part is its last, that is the last images of each class.
// The images then go in ImageFolder's order, the training images first, so that the generic
// split (the same count) holds out exactly those.

// `labels` in ImageFolder's order; the indices of the samples, spread over the classes.
std::vector<std::size_t> proportionalOrder(const std::vector<std::int64_t>& labels) {
  std::map<std::int64_t, std::int64_t> count;
  for (auto l : labels) ++count[l];
  std::map<std::int64_t, std::int64_t> seen;
  std::vector<double> place(labels.size());
  for (std::size_t i = 0; i < labels.size(); ++i)
    place[i] = (static_cast<double>(seen[labels[i]]++) + 0.5) / static_cast<double>(count[labels[i]]);
  std::vector<std::size_t> order(labels.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return place[a] < place[b]; });
  return order;
}

// The files to read (Note [Every class in both splits]): at most data.samples (0: all), those
// to train on first, then the held-out ones (DataSpec::heldOut, as makeDataset splits), each
// part in ImageFolder's order.
template <typename File>
std::vector<File> stratified(std::vector<File> files, const core::DataSpec& spec) {
  auto labelsOf = [](const std::vector<File>& fs) {
    std::vector<std::int64_t> labels;
    for (const auto& f : fs) labels.push_back(f.second);
    return labels;
  };
  auto pick = [&](const std::vector<std::size_t>& order, std::size_t from, std::size_t to) {
    std::vector<std::size_t> chosen(order.begin() + static_cast<std::ptrdiff_t>(from),
                                    order.begin() + static_cast<std::ptrdiff_t>(to));
    std::sort(chosen.begin(), chosen.end());
    std::vector<File> out;
    for (auto i : chosen) out.push_back(files[i]);
    return out;
  };
  if (spec.samples > 0 && static_cast<std::int64_t>(files.size()) > spec.samples)
    files = pick(proportionalOrder(labelsOf(files)), 0, static_cast<std::size_t>(spec.samples));
  const auto held = static_cast<std::size_t>(spec.heldOut(static_cast<std::int64_t>(files.size())));
  if (held == 0) return files;
  const auto order = proportionalOrder(labelsOf(files));
  auto train = pick(order, 0, files.size() - held);
  const auto val = pick(order, files.size() - held, files.size());
  train.insert(train.end(), val.begin(), val.end());
  return train;
}

// root/<class>/**/*.png|jpg|jpeg, in torchvision's ImageFolder order: classes are the sorted
// folder names, numbered from 0; files sorted by folder, then name.
void loadImageFolder(const core::DataSpec& spec, Dataset& d) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> classes;
  for (fs::directory_iterator it(spec.path, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory()) classes.push_back(it->path().filename().string());
  PTW_CHECK(!ec, "data.path: cannot read the folder \"", spec.path, "\" (", ec.message(), ")");
  std::sort(classes.begin(), classes.end());
  PTW_CHECK(!classes.empty(), "data.path: \"", spec.path, "\" has no class folders; expected root/<class>/<image>");
  std::vector<std::pair<std::string, std::int64_t>> files;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    const fs::path dir = fs::path(spec.path) / classes[c];
    std::vector<std::pair<std::string, std::string>> found;  // (folder, name)
    for (fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec), end;
         !ec && it != end; it.increment(ec)) {
      const std::string ext = lower(it->path().extension().string());
      if (it->is_regular_file() && (ext == ".png" || ext == ".jpg" || ext == ".jpeg"))
        found.emplace_back(it->path().parent_path().string(), it->path().filename().string());
    }
    PTW_CHECK(!ec, "data.path: cannot read the folder \"", dir.string(), "\" (", ec.message(), ")");
    PTW_CHECK(!found.empty(), "data.path: the class folder \"", dir.string(),
              "\" has no images (.png, .jpg, .jpeg); remove it or add its images");
    std::sort(found.begin(), found.end());
    for (const auto& [folder, name] : found)
      files.emplace_back((fs::path(folder) / name).string(), static_cast<std::int64_t>(c));
  }
  files = stratified(std::move(files), spec);
  std::vector<std::uint8_t> pixels;
  std::vector<std::int64_t> labels;
  Image first;
  for (const auto& [file, label] : files) {
    const std::string bytes = readBytes(file, "data.path");
    const std::string ext = lower(fs::path(file).extension().string());
    Image img = ext == ".png" ? decodePng(bytes, file) : decodeJpeg(bytes, file);
    if (first.hwc.empty()) {
      first = img;
    } else {
      PTW_CHECK(img.height == first.height && img.width == first.width && img.channels == first.channels,
                "data.path: \"", file, "\" is ", img.channels, "×", img.height, "×", img.width,
                " (channels×height×width); expected ", first.channels, "×", first.height, "×", first.width, " like \"",
                files.front().first, "\": every image must have the same size and channels");
    }
    auto chw = torch::from_blob(img.hwc.data(), {img.height, img.width, img.channels}, torch::kUInt8)
                   .permute({2, 0, 1})
                   .contiguous();
    const auto* p = chw.data_ptr<std::uint8_t>();
    pixels.insert(pixels.end(), p, p + chw.numel());
    labels.push_back(label);
  }
  const auto n = static_cast<std::int64_t>(labels.size());
  const std::int64_t features = first.channels * first.height * first.width;
  d.x = torch::from_blob(pixels.data(), {n, features}, torch::kUInt8).to(torch::kFloat32).div_(255);
  d.y = torch::from_blob(labels.data(), {n}, torch::kInt64).clone();
  d.sampleShape = {first.channels, first.height, first.width};
  d.classification = true;
}

torch::Tensor loadNpy(const std::string& file, const char* field) {
  const std::string bytes = readBytes(file, field);
  core::NpyHeader h;
  try {
    h = core::parseNpyHeader(bytes, file);
  } catch (const Error& e) {
    PTW_FAIL(field, ": ", e.what());
  }
  const auto type = h.descr == "<f4" ? torch::kFloat32 : h.descr == "<f8" ? torch::kFloat64 : torch::kInt64;
  return torch::from_blob(const_cast<char*>(bytes.data()) + h.dataOffset, h.shape, type).clone();
}

// Features [n, f] or images [n, C, H, W] in data.path; labels [n] (or [n, outputs] for
// regression) in data.labels_path. Float features become float32 as they are (no scaling).
void loadNpyData(const core::DataSpec& spec, Dataset& d) {
  auto x = loadNpy(spec.path, "data.path");
  auto y = loadNpy(spec.labelsPath, "data.labels_path");
  PTW_CHECK(x.dim() == 2 || x.dim() == 4, "data.path: \"", spec.path, "\" has shape ", x.sizes(),
            "; expected [samples, features] or images [samples, channels, height, width]");
  PTW_CHECK(y.dim() >= 1 && y.size(0) == x.size(0), "data.labels_path: \"", spec.labelsPath, "\" has shape ", y.sizes(),
            "; expected ", x.size(0), " labels, one per sample of \"", spec.path, "\"");
  d.classification = spec.task == "classification";
  if (d.classification) {
    PTW_CHECK(y.dim() == 1 && y.scalar_type() == torch::kInt64, "data.labels_path: \"", spec.labelsPath,
              "\": class labels must be int64 of shape [samples]; got ", y.scalar_type(), " ", y.sizes());
    PTW_CHECK(y.numel() == 0 || y.min().item<std::int64_t>() >= 0, "data.labels_path: \"", spec.labelsPath,
              "\": class labels must be >= 0");
  } else {
    PTW_CHECK(y.dim() <= 2, "data.labels_path: \"", spec.labelsPath,
              "\": targets must be [samples] or [samples, outputs]");
    y = y.to(torch::kFloat32);
    if (y.dim() == 1) y = y.unsqueeze(1);
  }
  if (x.dim() == 4) d.sampleShape = {x.size(1), x.size(2), x.size(3)};
  const std::int64_t n = spec.samples > 0 ? std::min(spec.samples, x.size(0)) : x.size(0);
  d.x = x.narrow(0, 0, n).reshape({n, -1}).to(torch::kFloat32).contiguous();
  d.y = y.narrow(0, 0, n).contiguous();
}

// (x - mean[c]) / std[c] per channel of images.
void normalise(const core::DataSpec& spec, Dataset& d) {
  if (spec.mean.empty()) return;
  const auto channels = static_cast<std::size_t>(d.sampleShape.empty() ? 0 : d.sampleShape[0]);
  PTW_CHECK(!d.sampleShape.empty(), "data.mean: \"", spec.path,
            "\" holds no images (a [samples, features] array); leave data.mean and data.std empty");
  PTW_CHECK(spec.mean.size() == channels && spec.std.size() == channels, "data.mean: ", spec.mean.size(),
            " value(s) and data.std: ", spec.std.size(), " for images with ", channels, " channel(s) in \"", spec.path,
            "\"; give one per channel");
  auto x = d.x.view({d.x.size(0), d.sampleShape[0], -1});
  for (std::size_t c = 0; c < channels; ++c) {
    auto plane = x.select(1, static_cast<std::int64_t>(c));
    plane.sub_(spec.mean[c]).div_(spec.std[c]);
  }
}

}  // namespace

bool augments(const core::DataSpec& data) { return data.cropPadding > 0 || data.flip; }

std::uint64_t augmentSeed(std::uint64_t seed, int rank, std::int64_t epoch, std::int64_t batch) {
  auto mix = [](std::uint64_t z) {  // splitmix64's finaliser
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  std::uint64_t h = mix(seed + 0x9e3779b97f4a7c15ULL);
  for (std::uint64_t v :
       {static_cast<std::uint64_t>(rank), static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(batch)})
    h = mix(h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)));
  return h;
}

torch::Tensor augmentImages(const torch::Tensor& batch, const std::vector<std::int64_t>& shape,
                            const core::DataSpec& data, std::uint64_t seed, torch::Tensor into) {
  PTW_CHECK(shape.size() == 3, "data.crop_padding, data.flip: augmentation needs images [channels, height, width]");
  const std::int64_t n = batch.size(0), C = shape[0], H = shape[1], W = shape[2], pad = data.cropPadding;
  auto in = batch.to(torch::kFloat32).contiguous();
  // Every element is written below, padding included: no fill kernel, which would run on the
  // intra-op threads (a loader thread stays on one core: Note [Batches ahead]).
  const bool fits = into.defined() && into.sizes() == in.sizes() && into.scalar_type() == torch::kFloat32 &&
                    into.is_contiguous() && into.device().is_cpu();
  auto out = fits ? into : torch::empty_like(in);
  const float* src = in.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  std::mt19937_64 gen(seed);
  for (std::int64_t i = 0; i < n; ++i) {
    // Per sample: the crop's corner in the padded image, then the flip (torchvision's RandomCrop,
    // RandomHorizontalFlip).
    const std::int64_t dy = pad > 0 ? static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(2 * pad + 1)) : 0;
    const std::int64_t dx = pad > 0 ? static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(2 * pad + 1)) : 0;
    const bool flip = data.flip && (gen() & 1) != 0;
    const float* s = src + i * C * H * W;
    float* o = dst + i * C * H * W;
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t y = 0; y < H; ++y) {
        const std::int64_t sy = y + dy - pad;
        float* row = o + (c * H + y) * W;
        if (sy < 0 || sy >= H) {  // padding: zeros
          std::fill(row, row + W, 0.0f);
          continue;
        }
        for (std::int64_t x = 0; x < W; ++x) {
          const std::int64_t sx = (flip ? W - 1 - x : x) + dx - pad;
          row[x] = sx >= 0 && sx < W ? s[(c * H + sy) * W + sx] : 0.0f;
        }
      }
  }
  return out;
}

namespace {

// Inputs ~ N(0, 1); target = x·W + b + noise·N(0, 1), with W and b drawn from the same seed.
void makeSyntheticRegression(const core::DataSpec& data, const core::ModelSpec& model, Dataset& d) {
  auto gen = at::detail::createCPUGenerator(data.seed);
  const auto n = data.samples, in = model.inFeatures, out = model.outFeatures;
  d.x = torch::randn({n, in}, gen, torch::kFloat32);
  auto w = torch::randn({in, out}, gen, torch::kFloat32);
  auto b = torch::randn({out}, gen, torch::kFloat32);
  d.y = d.x.matmul(w) + b + data.noise * torch::randn({n, out}, gen, torch::kFloat32);
}

// Gaussian blobs: one centre per class, samples assigned round-robin, shuffled by the sampler.
void makeSyntheticClassification(const core::DataSpec& data, const core::ModelSpec& model, Dataset& d) {
  auto gen = at::detail::createCPUGenerator(data.seed);
  const auto n = data.samples, in = model.inFeatures, out = model.outFeatures;
  auto centres = 3.0 * torch::randn({out, in}, gen, torch::kFloat32);
  d.y = torch::arange(n, torch::kInt64).remainder(out);
  d.x = centres.index_select(0, d.y) + (1.0 + data.noise) * torch::randn({n, in}, gen, torch::kFloat32);
  d.classification = true;
}

}  // namespace

Dataset makeDataset(const core::DataSpec& data, const core::ModelSpec& model) {
  torch::NoGradGuard noGrad;
  Dataset d;
  const std::string missing = core::dataFileProblem(data);  // the launcher's check, in case the files went since
  PTW_CHECK(missing.empty(), missing);
  switch (core::dataKindOf(data).kind) {
    case core::DataKind::Csv: loadCsv(data, d); break;
    case core::DataKind::Mnist: loadMnist(data, d); break;
    case core::DataKind::Cifar10: loadCifar10(data, d); break;
    case core::DataKind::ImageFolder: loadImageFolder(data, d); break;
    case core::DataKind::Npy: loadNpyData(data, d); break;
    case core::DataKind::SyntheticRegression: makeSyntheticRegression(data, model, d); break;
    case core::DataKind::SyntheticClassification: makeSyntheticClassification(data, model, d); break;
  }
  normalise(data, d);
  const std::int64_t total = d.x.size(0);
  const auto held = data.heldOut(total);
  if (held > 0) {
    d.valX = d.x.narrow(0, total - held, held);
    d.valY = d.y.narrow(0, total - held, held);
    d.x = d.x.narrow(0, 0, total - held);
    d.y = d.y.narrow(0, 0, total - held);
  }
  PTW_CHECK(d.size() >= 1, "data.val_fraction: ", data.valFraction, " leaves no training samples out of ", total);
  return d;
}

void checkWorkload(Model& model, const Dataset& data, const core::Profile& profile) {
  std::ostringstream have;
  have << data.x.sizes();
  PTW_CHECK(profile.model.kind == "torchscript" || data.x.size(1) == profile.model.inFeatures,
            "model.in_features: the data has ", data.x.size(1), " features per sample (inputs ", have.str(),
            "), the model expects ", profile.model.inFeatures, "; set model.in_features to ", data.x.size(1));
  const std::int64_t world = profile.strategy.ranks;
  PTW_CHECK(data.size() >= world, "strategy.ranks: more ranks (", world, ") than training samples (", data.size(),
            "); lower strategy.ranks or use more data");
  torch::NoGradGuard noGrad;
  auto x = data.x.narrow(0, 0, std::min<std::int64_t>(2, data.size()));
  auto y = data.y.narrow(0, 0, x.size(0));
  torch::Tensor out;
  model.setTraining(false);  // a forward in training mode would move BatchNorm's buffers (Note [Buffers])
  try {
    out = model.forward(x);
    model.setTraining(true);
  } catch (const c10::Error& e) {
    model.setTraining(true);
    std::string what = e.what_without_backtrace();
    PTW_FAIL("model: forward on inputs of shape ", have.str(), " failed: ", what.substr(0, what.find('\n')),
             "; check model.in_features and the model's expected input");
  }
  std::ostringstream got, want;
  got << out.sizes();
  if (data.classification) {
    const auto classes = data.y.max().item<std::int64_t>() + 1;
    PTW_CHECK(out.dim() == 2 && out.size(1) >= classes, "model: output shape ", got.str(),
              " does not fit cross-entropy over ", classes, " classes; the model must output [batch, ", classes,
              "] (model.out_features = ", classes, ")");
  } else {
    want << y.sizes();
    PTW_CHECK(out.sizes() == y.sizes(), "model: output shape ", got.str(), " does not fit the target shape ",
              want.str(), " of the MSE loss; set model.out_features to ", y.size(1));
  }
}

torch::Tensor computeLoss(const torch::Tensor& output, const torch::Tensor& target, bool classification) {
  return classification ? torch::nn::functional::cross_entropy(output, target) : torch::mse_loss(output, target);
}

torch::Tensor* findMomentumBuffer(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  auto& state = optimizer.state();
  auto it = state.find(compat::optimizerStateKey(param));
  if (it == state.end()) return nullptr;
  auto& buffer = static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
  PTW_CHECK(buffer.is_contiguous() && buffer.scalar_type() == torch::kFloat && buffer.numel() == param.numel(),
            "optimizer state: a momentum buffer does not match its parameter (", buffer.sizes(), " against ",
            param.sizes(), ")");
  return &buffer;
}

torch::Tensor& addMomentumBuffer(torch::optim::Optimizer& optimizer, const torch::Tensor& param, torch::Tensor buffer) {
  auto st = std::make_unique<torch::optim::SGDParamState>();
  st->momentum_buffer(std::move(buffer));
  auto& added = *optimizer.state().insert_or_assign(compat::optimizerStateKey(param), std::move(st)).first->second;
  return static_cast<torch::optim::SGDParamState&>(added).momentum_buffer();
}

float* momentumBuffer(torch::optim::Optimizer& optimizer, const torch::Tensor& param, bool& first) {
  torch::Tensor* b = findMomentumBuffer(optimizer, param);
  first = b == nullptr;
  if (first)
    b = &addMomentumBuffer(optimizer, param, torch::empty_like(param, torch::MemoryFormat::Contiguous).detach());
  return b->data_ptr<float>();
}

std::vector<SgdPiece> sgdPieces(torch::optim::SGD& sgd, const std::function<bool(torch::Tensor&)>& take) {
  std::vector<SgdPiece> pieces;
  std::size_t at = 0;
  for (auto& group : sgd.param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!take(p)) continue;
      SgdPiece piece;
      piece.w = p.data_ptr<float>();
      piece.at = at;
      piece.n = static_cast<std::size_t>(p.numel());
      piece.scalars = sgdScalars(o);
      if (o.momentum() != 0) piece.buf = momentumBuffer(sgd, p, piece.first);
      at += piece.n;
      pieces.push_back(piece);
    }
  }
  return pieces;
}

SgdScalars sgdScalars(const torch::optim::SGDOptions& o) {
  SgdScalars s;
  s.lr = static_cast<float>(o.lr());
  s.momentum = static_cast<float>(o.momentum());
  s.decay = static_cast<float>(o.weight_decay());
  s.keep = static_cast<float>(1 - o.dampening());
  s.nesterov = o.nesterov();
  return s;
}

// Note [Fused SGD]
// torch::optim::SGD spends about ten small operator calls per parameter and step (each
// dispatched, some wrapping the scalar into a tensor and converting it), which on a small
// model is a noticeable share of the whole step. For the common case (dense float32 parameters and
// gradients on the CPU, contiguous) this does the same arithmetic in one pass over each
// tensor (sgdUpdate, kernels.h), in float like the kernels do, and keeps its momentum buffers where SGD does
// (state_, one SGDParamState per parameter), so checkpoints load into either. Anything
// else (CUDA, other dtypes, sparse gradients) takes SGD's own step. test_workload holds
// it to torch::optim::SGD, option by option. DDP over shared memory runs the same update on
// its share of the parameters (Note [Sharded SGD step]).
namespace {

class FusedSgd final : public torch::optim::SGD {
 public:
  using SGD::SGD;

  torch::Tensor step(LossClosure closure = nullptr) override {
    if (closure || !fusable()) return SGD::step(std::move(closure));
    for (auto& group : param_groups_) {
      const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
      for (auto& p : group.params()) {
        const auto& grad = p.grad();
        if (!grad.defined()) continue;
        float* w = p.data_ptr<float>();
        const float* g = grad.data_ptr<float>();
        const std::int64_t n = p.numel();
        bool first = false;
        float* buf = o.momentum() != 0 ? momentumBuffer(*this, p, first) : nullptr;
        sgdUpdate(w, buf, g, n, sgdScalars(o), first);
      }
    }
    return {};
  }

 private:
  bool fusable() const {
    for (const auto& group : param_groups_)
      for (const auto& p : group.params()) {
        const auto& g = p.grad();
        if (!p.device().is_cpu() || p.scalar_type() != torch::kFloat || !p.is_contiguous()) return false;
        if (g.defined() &&
            (g.is_sparse() || g.scalar_type() != torch::kFloat || !g.is_contiguous() || g.numel() != p.numel()))
          return false;
      }
    return true;
  }
};

}  // namespace

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const core::HyperSpec& h,
                                                       const std::vector<torch::Tensor>& params) {
  if (h.optimizer == "adam")
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(h.lr).weight_decay(h.weightDecay));
  if (h.optimizer == "adamw")
    return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(h.lr).weight_decay(h.weightDecay));
  return std::make_unique<FusedSgd>(
      params, torch::optim::SGDOptions(h.lr).momentum(h.momentum).nesterov(h.nesterov).weight_decay(h.weightDecay));
}

double learningRate(const core::HyperSpec& h, std::int64_t step) {
  double lr = h.lr;
  if (h.schedule == "step") {
    lr *= std::pow(h.gamma, static_cast<double>(step / h.stepSize));
  } else if (h.schedule == "cosine" && h.maxSteps > 0) {
    const double t = std::min(1.0, static_cast<double>(step) / static_cast<double>(h.maxSteps));
    lr *= 0.5 * (1.0 + std::cos(M_PI * t));
  }
  if (step < h.warmupSteps) lr *= static_cast<double>(step + 1) / static_cast<double>(h.warmupSteps);
  return lr;
}

}  // namespace ptw::engine
