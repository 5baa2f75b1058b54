// runtime/data: packing of hand-built documents against arrays derived by hand (segment ids,
// positions, next-token targets, total_weights); a document longer than the row split into
// pieces with the iterator's offset; packing=false truncating; the byte tokenizer and token file
// round-tripping every fortunes file byte for byte; the document order from data_shuffle_seed;
// token files with bad fields refused naming the file and offset.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "runtime/data/BatchBuilder.h"
#include "runtime/data/ByteTokenizer.h"
#include "runtime/data/Corpus.h"
#include "runtime/data/DataSettings.h"
#include "runtime/data/Fingerprint.h"
#include "runtime/data/TokenFile.h"
#include "runtime/data/Tokenize.h"
#include "tests/support/Command.h"

namespace precast::data {
namespace {

namespace fs = std::filesystem;
using Row = std::vector<int32_t>;

enum {
  kInputs,
  kInputsPosition,
  kInputsSegmentation,
  kTargets,
  kTargetsPosition,
  kTargetsSegmentation
};

// A = BOS 10 11 12 EOS, B = BOS 20 21 EOS, C = BOS 30 31 32 33 34 EOS (BOS 256, EOS 257).
TokenDocuments three_documents() {
  TokenDocuments docs;
  docs.add_document({256, 10, 11, 12, 257});
  docs.add_document({256, 20, 21, 257});
  docs.add_document({256, 30, 31, 32, 33, 34, 257});
  return docs;
}

GlobalBatch shape(int64_t rows, int64_t length) {
  GlobalBatch b;
  b.rows = rows;
  b.length = length;
  return b;
}

BatchOptions options(bool packing, bool shuffle, uint32_t seed, int64_t num_epoch, uint32_t pad) {
  BatchOptions o;
  o.packing = packing;
  o.shuffle = shuffle;
  o.shuffle_seed = seed;
  o.num_epoch = num_epoch;
  o.pad = pad;
  return o;
}

int64_t total_weights(const GlobalBatch& b) {
  int64_t n = 0;
  for (int32_t s : b.arrays[kTargetsSegmentation]) n += s != 0;
  return n;
}

TEST(Packing, SeveralDocumentsPerRowWithSegmentsPositionsAndNextTokenTargets) {
  TokenDocuments docs = three_documents();
  BatchBuilder builder(&docs, options(true, false, 0, 1, 258));
  GlobalBatch b = shape(2, 10);
  builder.build(b);
  // Row 0: A (5) and B (4); C (7) does not fit the 1 left, so it starts row 1.
  EXPECT_EQ(b.arrays[kInputs], (Row{256, 10, 11, 12, 257, 256, 20,  21,  257, 258,  //
                                    256, 30, 31, 32, 33,  34,  257, 258, 258, 258}));
  EXPECT_EQ(b.arrays[kInputsPosition], (Row{0, 1, 2, 3, 4, 0, 1, 2, 3, 0,  //
                                            0, 1, 2, 3, 4, 5, 6, 0, 0, 0}));
  EXPECT_EQ(b.arrays[kInputsSegmentation], (Row{1, 1, 1, 1, 1, 2, 2, 2, 2, 0,  //
                                                1, 1, 1, 1, 1, 1, 1, 0, 0, 0}));
  // The next token of the same document; a document's last token predicts nothing.
  EXPECT_EQ(b.arrays[kTargets], (Row{10, 11, 12, 257, 258, 20,  21,  257, 258, 258,  //
                                     30, 31, 32, 33,  34,  257, 258, 258, 258, 258}));
  EXPECT_EQ(b.arrays[kTargetsPosition], b.arrays[kInputsPosition]);
  EXPECT_EQ(b.arrays[kTargetsSegmentation], (Row{1, 1, 1, 1, 0, 2, 2, 2, 0, 0,  //
                                                 1, 1, 1, 1, 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(total_weights(b), 4 + 3 + 6);  // n - 1 targets per document
  EXPECT_TRUE(builder.exhausted());        // num_epoch=1, all three read
}

TEST(Packing, OneDocumentPerRowTruncatedWithoutPacking) {
  TokenDocuments docs = three_documents();
  BatchBuilder builder(&docs, options(false, false, 0, 1, 258));
  GlobalBatch b = shape(3, 6);
  builder.build(b);
  EXPECT_EQ(b.arrays[kInputs], (Row{256, 10, 11, 12, 257, 258,   //
                                    256, 20, 21, 257, 258, 258,  //
                                    256, 30, 31, 32, 33, 34}));
  EXPECT_EQ(b.arrays[kInputsSegmentation], (Row{1, 1, 1, 1, 1, 0,  //
                                                1, 1, 1, 1, 0, 0,  //
                                                1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(b.arrays[kInputsPosition], (Row{0, 1, 2, 3, 4, 0,  //
                                            0, 1, 2, 3, 0, 0,  //
                                            0, 1, 2, 3, 4, 5}));
  // C truncated to 6 tokens: its 6th input still has its next token (EOS) as target.
  EXPECT_EQ(b.arrays[kTargets], (Row{10, 11, 12, 257, 258, 258,   //
                                     20, 21, 257, 258, 258, 258,  //
                                     30, 31, 32, 33, 34, 257}));
  EXPECT_EQ(b.arrays[kTargetsSegmentation], (Row{1, 1, 1, 1, 0, 0,  //
                                                 1, 1, 1, 0, 0, 0,  //
                                                 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(total_weights(b), 4 + 3 + 6);
  EXPECT_TRUE(builder.exhausted());
}

TEST(Packing, ADocumentLongerThanARowContinuesAtTheSavedOffset) {
  TokenDocuments docs;
  std::vector<uint32_t> d(13);
  std::iota(d.begin(), d.end(), 100u);  // 100 .. 112
  docs.add_document(d);
  BatchBuilder builder(&docs, options(true, false, 0, 2, 0));
  GlobalBatch b = shape(1, 5);
  builder.build(b);
  EXPECT_EQ(b.arrays[kInputs], (Row{100, 101, 102, 103, 104}));
  EXPECT_EQ(b.arrays[kTargets], (Row{101, 102, 103, 104, 105}));  // 105 is in the next piece
  EXPECT_EQ(b.arrays[kTargetsSegmentation], (Row{1, 1, 1, 1, 1}));
  EXPECT_EQ(builder.position(), (DataPosition{0, 0, 5}));
  builder.build(b);
  EXPECT_EQ(b.arrays[kInputs], (Row{105, 106, 107, 108, 109}));
  EXPECT_EQ(b.arrays[kInputsPosition], (Row{0, 1, 2, 3, 4}));  // each piece from 0
  builder.build(b);
  EXPECT_EQ(b.arrays[kInputs], (Row{110, 111, 112, 0, 0}));
  EXPECT_EQ(b.arrays[kTargets], (Row{111, 112, 0, 0, 0}));
  EXPECT_EQ(b.arrays[kTargetsSegmentation], (Row{1, 1, 0, 0, 0}));
  EXPECT_EQ(builder.position(), (DataPosition{1, 0, 0}));  // the second epoch begins
  EXPECT_FALSE(builder.exhausted());

  // A builder set to a saved position continues exactly there.
  BatchBuilder resumed(&docs, options(true, false, 0, 2, 0));
  ASSERT_TRUE(resumed.set_position(DataPosition{0, 0, 5}).ok());
  resumed.build(b);
  EXPECT_EQ(b.arrays[kInputs], (Row{105, 106, 107, 108, 109}));
  Status outside = resumed.set_position(DataPosition{0, 0, 13});
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.error().code(), ExitCode::kIncompatible);
}

TEST(Packing, ThePositionRoundTripsThroughCheckpointJsonAndRefusesAnotherDataset) {
  TokenDocuments docs = three_documents();
  std::string json = position_json("tokens", docs, 7, DataPosition{1, 2, 3}, 40);
  EXPECT_EQ(json,
            "{\"dataset_type\": \"tokens\", \"documents\": 3, \"tokens\": 16, "
            "\"data_shuffle_seed\": 7, \"epoch\": 1, \"document\": 2, \"offset\": 3, "
            "\"next_step\": 40}");
  Expected<checkpoint::JsonValue> parsed = checkpoint::parse_json(json);
  ASSERT_TRUE(parsed.ok());
  Expected<DataPosition> p = parse_position(*parsed, "tokens", docs, 7);
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(*p, (DataPosition{1, 2, 3}));
  Expected<DataPosition> other_seed = parse_position(*parsed, "tokens", docs, 8);
  ASSERT_FALSE(other_seed.ok());
  EXPECT_NE(other_seed.error().message().find("data_shuffle_seed 7 (this run: 8)"),
            std::string::npos);
  docs.add_document({1, 2});
  Expected<DataPosition> other_data = parse_position(*parsed, "tokens", docs, 7);
  ASSERT_FALSE(other_data.ok());
  EXPECT_NE(
      other_data.error().message().find("3 documents (this run: 4), 16 tokens (this run: 18)"),
      std::string::npos)
      << other_data.error().message();
}

// The plain text files of Debian's fortunes package (not the .dat indexes or .u8 links).
std::vector<fs::path> fortune_files() {
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator("/usr/share/games/fortunes")) {
    std::string ext = e.path().extension().string();
    if (e.is_regular_file() && ext != ".dat" && ext != ".u8") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// CRC-32C's check value (RFC 3720's parameters: crc32c("123456789") = 0xE3069283) and the empty
// input (0), by the CPU instruction and the table alike; both agree on 1 MiB + 5 bytes of LCG
// bytes (every tail length of the instruction loop); a token file's fingerprint is the CRC of
// its whole bytes, and position_json records it.
TEST(Fingerprint, Crc32cMatchesTheCheckValueAndTheTokenFileBytes) {
  EXPECT_EQ(content_crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(content_crc32c_portable("123456789", 9), 0xE3069283u);
  EXPECT_EQ(content_crc32c("", 0), 0u);
  std::string bytes((1 << 20) + 5, '\0');
  uint32_t state = 7;
  for (char& c : bytes) {
    state = state * 1103515245u + 12345u;
    c = static_cast<char>(state >> 24);
  }
  for (size_t tail = 0; tail < 8; ++tail) {
    size_t n = bytes.size() - tail;
    EXPECT_EQ(content_crc32c(bytes.data(), n), content_crc32c_portable(bytes.data(), n)) << tail;
  }
  fs::path file = fs::temp_directory_path() / ("precast_fingerprint_" + std::to_string(getpid()) +
                                               ".tokens");
  ASSERT_TRUE(write_token_file(file.string(), three_documents()).ok());
  Expected<TokenDocuments> read = read_token_file(file.string());
  ASSERT_TRUE(read.ok()) << read.error().message();
  std::string on_disk = bytes_of(file);
  ASSERT_EQ(read->sources.size(), 1u);
  EXPECT_EQ(read->sources[0].path, file.string());
  EXPECT_EQ(read->sources[0].bytes, on_disk.size());
  EXPECT_EQ(read->sources[0].crc32c, content_crc32c_portable(on_disk.data(), on_disk.size()));
  EXPECT_NE(position_json("tokens", *read, 7, DataPosition{0, 0, 0}, 1)
                .find(fmt::format("\"files\": [{{\"path\": \"{}\", \"bytes\": {}, \"crc32c\": "
                                  "\"{:08x}\"}}]}}",
                                  file.string(), on_disk.size(), read->sources[0].crc32c)),
            std::string::npos);
  fs::remove(file);
}

TEST(ByteTokenizer, EveryFortunesFileRoundTripsByteForByteThroughATokenFile) {
  std::vector<fs::path> files = fortune_files();
  ASSERT_GE(files.size(), 40u) << "is Debian's fortunes package installed (tools/setup.sh)?";
  fs::path out =
      fs::temp_directory_path() / ("precast_data_test_" + std::to_string(::getpid()) + ".tokens");
  int64_t documents = 0;
  for (const fs::path& file : files) {
    std::string text = bytes_of(file);
    ASSERT_TRUE(write_token_file(out.string(), tokenize_text(text, "%")).ok());
    Expected<TokenDocuments> back = read_token_file(out.string());
    ASSERT_TRUE(back.ok()) << back.error().message();
    EXPECT_EQ(back->token_bytes, 2u);  // ids below 65536: uint16
    std::vector<std::string> pieces;
    for (size_t d = 0; d < back->document_count(); ++d) {
      std::vector<uint32_t> doc = back->document(d);
      ASSERT_EQ(doc.front(), kByteBos);
      ASSERT_EQ(doc.back(), kByteEos);
      Expected<std::string> piece = detokenize_bytes(doc);
      ASSERT_TRUE(piece.ok()) << piece.error().message();
      pieces.push_back(*piece);
    }
    documents += static_cast<int64_t>(pieces.size());
    EXPECT_TRUE(join_documents(pieces, "%") == text) << file;
  }
  fs::remove(out);
  EXPECT_GT(documents, 10000);
}

TEST(ByteTokenizer, SeparatorLinesSplitDocumentsAndTheEntropyIsCountedFromTokens) {
  EXPECT_EQ(split_documents("a\n%\nb\nc\n%\n", "%"),
            (std::vector<std::string>{"a\n", "b\nc\n", ""}));
  EXPECT_EQ(split_documents("%\n%x\n%", "%"), (std::vector<std::string>{"", "%x\n%"}));
  // Two documents "ab\n": predicted tokens a, b, \n, EOS twice: 4 equally likely, 2 bits.
  TokenDocuments docs = tokenize_text("ab\n%\nab\n", "%");
  EXPECT_EQ(docs.tokens,
            (std::vector<uint32_t>{256, 'a', 'b', '\n', 257, 256, 'a', 'b', '\n', 257}));
  double bits = 0, nats = 0;
  unigram_entropy(docs, bits, nats);
  EXPECT_DOUBLE_EQ(bits, 2.0);
  EXPECT_DOUBLE_EQ(nats, 2.0 * std::log(2.0));
  EXPECT_FALSE(detokenize_bytes({256, 258, 257}).ok());  // PAD is not text
}

TEST(Order, TheSameSeedGivesTheSameBatchesAndAnotherSeedAnotherOrder) {
  TokenDocuments corpus;
  for (const fs::path& file : fortune_files()) {
    TokenDocuments docs = tokenize_text(bytes_of(file), "%");
    for (size_t d = 0; d < docs.document_count(); ++d) corpus.add_document(docs.document(d));
  }
  auto batches = [&](uint32_t seed) {
    BatchBuilder builder(&corpus, options(true, true, seed, 1, kBytePad));
    std::vector<std::vector<int32_t>> out;
    GlobalBatch b = shape(4, 64);
    for (int i = 0; i < 5; ++i) {
      builder.build(b);
      out.push_back(b.arrays[kInputs]);
    }
    return out;
  };
  EXPECT_EQ(batches(3), batches(3));
  EXPECT_NE(batches(3), batches(4));
  // Each epoch's order is a permutation, and epochs differ.
  BatchBuilder builder(&corpus, options(true, true, 3, 1, 0));
  std::vector<uint32_t> first = builder.order(0);
  std::vector<uint32_t> second = builder.order(1);
  EXPECT_NE(first, second);
  std::sort(first.begin(), first.end());
  std::vector<uint32_t> identity(corpus.document_count());
  std::iota(identity.begin(), identity.end(), 0u);
  EXPECT_EQ(first, identity);
  BatchBuilder in_order(&corpus, options(true, false, 0, 1, 0));
  EXPECT_EQ(in_order.order(0), identity);  // enable_data_shuffling=false: file order
}

// Writes `bytes` to a fresh file and returns read_token_file's error message.
std::string refusal(const std::string& name, const std::string& bytes, ExitCode* code = nullptr) {
  fs::path p = fs::temp_directory_path() / (name + std::to_string(::getpid()));
  std::ofstream(p, std::ios::binary) << bytes;
  Expected<TokenDocuments> r = read_token_file(p.string());
  fs::remove(p);
  if (r.ok()) return "accepted";
  if (code != nullptr) *code = r.error().code();
  return r.error().message().substr(p.string().size());  // after the file's name
}

TEST(TokenFile, BadFieldsAreRefusedNamingTheOffset) {
  fs::path p = fs::temp_directory_path() / ("good" + std::to_string(::getpid()));
  ASSERT_TRUE(write_token_file(p.string(), three_documents()).ok());
  std::string good = bytes_of(p);
  fs::remove(p);
  // 48 header bytes, 4 offsets of 8 bytes, 16 uint16 tokens.
  ASSERT_EQ(good.size(), 48u + 32u + 32u);
  ExitCode code = ExitCode::kSuccess;
  std::string magic = good;
  magic[0] = 'X';
  EXPECT_EQ(refusal("magic", magic, &code).rfind(": offset 0: the file starts with bytes 58", 0),
            0u);
  EXPECT_EQ(code, ExitCode::kUsage);
  std::string version = good;
  version[8] = 2;
  EXPECT_EQ(refusal("version", version).rfind(": offset 8: version 2", 0), 0u);
  std::string width = good;
  width[12] = 3;
  EXPECT_EQ(refusal("width", width).rfind(": offset 12: token width 3 bytes", 0), 0u);
  EXPECT_EQ(refusal("short", good.substr(0, good.size() - 3))
                .rfind(": offset 109: truncated: the header (offset 16) records 16 tokens of 2 "
                       "bytes and 3 documents, which take 112 bytes, but the file has 109",
                       0),
            0u);
  std::string offsets = good;
  offsets[48 + 16] = 2;  // document 2 would start at token 2, before document 1's start (5)
  EXPECT_EQ(refusal("offsets", offsets).rfind(": offset 64: document offset 2 is 2", 0), 0u);
}

// The layout of runtime/data/README.md, written and read by plain Python (struct): a file Python
// writes reads back here, and Python decodes the file written here to the same documents.
TEST(TokenFile, PythonWritesAndReadsTheDocumentedLayout) {
  fs::path dir = fs::temp_directory_path() / ("precast_token_py_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path script = dir / "layout.py";
  std::ofstream(script) << R"(import struct, sys
mode, path = sys.argv[1], sys.argv[2]
if mode == "write":
    docs = [[256, 70000, 257], [1, 2], []]
    tokens = [t for d in docs for t in d]
    offsets = [0]
    for d in docs:
        offsets.append(offsets[-1] + len(d))
    with open(path, "wb") as f:
        f.write(b"PCTOKENS" + struct.pack("<IIQQIIII", 1, 4, len(tokens), len(docs), 256, 257,
                                          0xffffffff, 0))
        f.write(struct.pack("<%dQ" % len(offsets), *offsets))
        f.write(struct.pack("<%dI" % len(tokens), *tokens))
else:
    data = open(path, "rb").read()
    magic = data[:8]
    version, width, n, d, bos, eos, pad, _ = struct.unpack_from("<IIQQIIII", data, 8)
    offsets = struct.unpack_from("<%dQ" % (d + 1), data, 48)
    fmt = "<%d%s" % (n, "H" if width == 2 else "I")
    tokens = struct.unpack_from(fmt, data, 48 + 8 * (d + 1))
    assert len(data) == 48 + 8 * (d + 1) + n * width
    docs = [list(tokens[offsets[i]:offsets[i + 1]]) for i in range(d)]
    print(magic.decode(), version, width, bos, eos, pad, docs)
)";
  fs::path from_python = dir / "python.tokens";
  testing::CommandResult w = testing::run_command("/usr/bin/python3 " + script.string() +
                                                  " write " + from_python.string());
  ASSERT_EQ(w.code, 0) << w.output;
  Expected<TokenDocuments> read = read_token_file(from_python.string());
  ASSERT_TRUE(read.ok()) << read.error().message();
  EXPECT_EQ(read->token_bytes, 4u);
  EXPECT_EQ(read->tokens, (std::vector<uint32_t>{256, 70000, 257, 1, 2}));
  EXPECT_EQ(read->starts, (std::vector<uint64_t>{0, 3, 5, 5}));
  EXPECT_EQ(read->pad, kNoSpecialToken);

  fs::path from_here = dir / "here.tokens";
  ASSERT_TRUE(write_token_file(from_here.string(), three_documents()).ok());
  testing::CommandResult r = testing::run_command("/usr/bin/python3 " + script.string() +
                                                  " read " + from_here.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output,
            "PCTOKENS 1 2 4294967295 4294967295 4294967295 [[256, 10, 11, 12, 257], [256, 20, 21, "
            "257], [256, 30, 31, 32, 33, 34, 257]]\n");
  fs::remove_all(dir);
}

TEST(Corpus, TextFilesAreDocumentsOfBytesWithEveryTwentiethHeldOut) {
  fs::path dir = fs::temp_directory_path() / ("precast_corpus_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // 41 files "f00".."f40" holding "xN"; an empty one is skipped and not counted.
  for (int i = 0; i <= 40; ++i) {
    std::ofstream(dir / (i < 10 ? "f0" + std::to_string(i) : "f" + std::to_string(i))) << "x" << i;
  }
  std::ofstream(dir / "zempty").close();
  DataSettings settings;
  settings.type = "text";
  settings.path = dir.string();
  Expected<Corpus> corpus = load_corpus(settings, 259);
  ASSERT_TRUE(corpus.ok()) << corpus.error().message();
  // Documents 19 and 39 of 41 held out; 39 trained on.
  EXPECT_EQ(corpus->held_out_documents, 2);
  EXPECT_EQ(corpus->skipped_empty, 1);
  ASSERT_EQ(corpus->train.document_count(), 39u);
  EXPECT_EQ(corpus->train.document(0), (std::vector<uint32_t>{256, 'x', '0', 257}));
  EXPECT_EQ(corpus->train.document(19), (std::vector<uint32_t>{256, 'x', '2', '0', 257}));
  EXPECT_EQ(corpus->pad, kBytePad);

  settings.add_bos = false;
  settings.add_eos = false;
  corpus = load_corpus(settings, 259);
  ASSERT_TRUE(corpus.ok());
  EXPECT_EQ(corpus->train.document(0), (std::vector<uint32_t>{'x', '0'}));

  // The byte tokenizer's ids need vocab_size >= 259: a config error naming both values.
  Expected<Corpus> small = load_corpus(settings, 256);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.error().code(), ExitCode::kUsage);
  EXPECT_EQ(small.error().message().rfind("dataset_type=text needs vocab_size >= 259", 0), 0u);
  EXPECT_NE(small.error().message().find("the artifact has vocab_size=256"), std::string::npos);
  fs::remove_all(dir);
}

TEST(DataSettings, KeysAreReadAndBadValuesRefusedByName) {
  Expected<DataSettings> s = data_settings({{"dataset_type", "tokens"},
                                            {"dataset_path", "'a.tokens,b/*.tokens'"},
                                            {"packing", "False"},
                                            {"enable_data_shuffling", "false"},
                                            {"data_shuffle_seed", "9"},
                                            {"num_epoch", "3"}});
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->path, "a.tokens,b/*.tokens");
  EXPECT_FALSE(s->packing);
  EXPECT_FALSE(s->shuffle);
  EXPECT_EQ(s->shuffle_seed, 9u);
  EXPECT_EQ(s->num_epoch, 3);
  Expected<DataSettings> tfds = data_settings({{"dataset_type", "tfds"}});
  ASSERT_FALSE(tfds.ok());
  EXPECT_EQ(tfds.error().message().rfind("dataset_type=tfds is not supported yet", 0), 0u);
  Expected<DataSettings> no_path =
      data_settings({{"dataset_type", "text"}, {"dataset_path", "''"}});
  ASSERT_FALSE(no_path.ok());
  EXPECT_EQ(no_path.error().message().rfind("dataset_type=text needs dataset_path", 0), 0u);
  Expected<DataSettings> epochs = data_settings({{"num_epoch", "0"}});
  ASSERT_FALSE(epochs.ok());
  EXPECT_EQ(epochs.error().code(), ExitCode::kUsage);
}

}  // namespace
}  // namespace precast::data
