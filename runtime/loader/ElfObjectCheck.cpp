// Bounds checks on a relocatable ELF object (see ElfObjectCheck.h). Reads with memcpy: the
// bytes may sit at any alignment.
#include "runtime/loader/ElfObjectCheck.h"

#include <elf.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace precast::runtime {
namespace {

#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
#else
#error "precast_runtime_loader supports x86_64 and aarch64 hosts"
#endif

std::string machine_name(uint16_t machine) {
  switch (machine) {
    case EM_X86_64:
      return "x86_64";
    case EM_AARCH64:
      return "aarch64";
    case EM_386:
      return "i386";
    case EM_ARM:
      return "arm";
    case EM_RISCV:
      return "riscv";
    case EM_PPC64:
      return "ppc64";
    default:
      return "ELF machine " + std::to_string(machine);
  }
}

// The bytes a relocation's fixup touches: `before` bytes ahead of r_offset (instruction bytes
// JITLink inspects to relax GOT loads) and `width` bytes from r_offset on.
struct FixupSpan {
  uint64_t before = 0;
  uint64_t width = 8;  // unknown types: the widest; JITLink rejects them anyway
};

FixupSpan x86_64_fixup(uint32_t type) {
  switch (type) {
    case R_X86_64_64:
    case R_X86_64_PC64:
    case R_X86_64_GOTOFF64:
    case R_X86_64_GOTPC64:
    case R_X86_64_GOTPCREL64:
    case R_X86_64_SIZE64:
      return {0, 8};
    case R_X86_64_16:
    case R_X86_64_PC16:
      return {0, 2};
    case R_X86_64_8:
    case R_X86_64_PC8:
      return {0, 1};
    case R_X86_64_GOTPCRELX:
      return {2, 4};  // opcode and ModRM precede the fixup
    case R_X86_64_REX_GOTPCRELX:
      return {3, 4};  // REX, opcode, ModRM
    case R_X86_64_PC32:
    case R_X86_64_GOT32:
    case R_X86_64_PLT32:
    case R_X86_64_GOTPCREL:
    case R_X86_64_32:
    case R_X86_64_32S:
    case R_X86_64_GOTPC32:
    case R_X86_64_SIZE32:
    case R_X86_64_GOTTPOFF:
    case R_X86_64_TLSGD:
    case R_X86_64_TLSLD:
    case R_X86_64_DTPOFF32:
    case R_X86_64_TPOFF32:
      return {0, 4};
    default:
      return {};
  }
}

FixupSpan aarch64_fixup(uint32_t type) {
  switch (type) {
    case R_AARCH64_ABS64:
    case R_AARCH64_PREL64:
      return {0, 8};
    case R_AARCH64_ABS16:
    case R_AARCH64_PREL16:
      return {0, 2};
    default:
      return {0, 4};  // data words and every instruction fixup
  }
}

class ElfReader {
 public:
  ElfReader(const char* object, size_t size, const std::string& name)
      : object_(object), size_(size), name_(name) {}

  Status check() {
    PRECAST_RETURN_IF_ERROR(read_header());
    PRECAST_RETURN_IF_ERROR(read_sections());
    for (uint16_t i = 0; i < header_.e_shnum; ++i) {
      const Elf64_Shdr& section = sections_[i];
      if (section.sh_type == SHT_SYMTAB) PRECAST_RETURN_IF_ERROR(check_symbols(i));
      if (section.sh_type == SHT_RELA || section.sh_type == SHT_REL) {
        PRECAST_RETURN_IF_ERROR(check_relocations(i));
      }
      if (section.sh_type != SHT_NOBITS && section_name(section) == ".eh_frame") {
        PRECAST_RETURN_IF_ERROR(check_eh_frame(section));
      }
    }
    return Status::success();
  }

 private:
  Error damaged(const std::string& what) const {
    return Error(ExitCode::kIncompatible, name_ + ": the object code is damaged (" + what + ")");
  }

  template <typename T>
  T read(uint64_t offset) const {
    T value;
    std::memcpy(&value, object_ + offset, sizeof(T));
    return value;
  }

  Status read_header() {
    if (size_ < sizeof(Elf64_Ehdr) || std::memcmp(object_, ELFMAG, SELFMAG) != 0) {
      return Error(ExitCode::kIncompatible, name_ + ": not an ELF object (no ELF header)");
    }
    header_ = read<Elf64_Ehdr>(0);
    if (header_.e_ident[EI_CLASS] != ELFCLASS64 || header_.e_ident[EI_DATA] != ELFDATA2LSB) {
      return Error(ExitCode::kIncompatible, name_ + ": not a 64-bit little-endian ELF object");
    }
    if (header_.e_type != ET_REL) {
      return Error(ExitCode::kIncompatible, name_ + ": not a relocatable object (ELF type " +
                                                std::to_string(header_.e_type) + ")");
    }
    if (header_.e_machine != kHostMachine) {
      return Error(ExitCode::kIncompatible,
                   name_ + ": the object code is for " + machine_name(header_.e_machine) +
                       " but this machine is " + machine_name(kHostMachine) +
                       "; compile for this machine's target");
    }
    return Status::success();
  }

  Status read_sections() {
    uint64_t table_bytes = uint64_t(header_.e_shnum) * sizeof(Elf64_Shdr);
    if (header_.e_shentsize != sizeof(Elf64_Shdr) || header_.e_shnum == 0 ||
        header_.e_shoff > size_ || table_bytes > size_ - header_.e_shoff) {
      return damaged("section table outside the object; truncated?");
    }
    for (uint16_t i = 0; i < header_.e_shnum; ++i) {
      Elf64_Shdr section = read<Elf64_Shdr>(header_.e_shoff + uint64_t(i) * sizeof(Elf64_Shdr));
      if (section.sh_type != SHT_NOBITS && !inside(section.sh_offset, section.sh_size)) {
        return damaged("section " + std::to_string(i) + " outside the object; truncated?");
      }
      // JITLink takes alignments as llvm::Align, which must be a power of two; past a page
      // the in-process memory manager cannot honour them.
      if (section.sh_addralign > 4096 || (section.sh_addralign & (section.sh_addralign - 1)) != 0) {
        return damaged("section " + std::to_string(i) + " alignment " +
                       std::to_string(section.sh_addralign));
      }
      if (section.sh_type == SHT_STRTAB && section.sh_size > 0 &&
          object_[section.sh_offset + section.sh_size - 1] != '\0') {
        return damaged("string table " + std::to_string(i) + " not terminated");
      }
      sections_.push_back(section);
    }
    if (header_.e_shstrndx >= header_.e_shnum ||
        sections_[header_.e_shstrndx].sh_type != SHT_STRTAB) {
      return damaged("no section name table");
    }
    for (const Elf64_Shdr& section : sections_) {
      if (section.sh_name >= sections_[header_.e_shstrndx].sh_size) {
        return damaged("section name outside the name table");
      }
    }
    return Status::success();
  }

  // Names are NUL-terminated inside the name table (read_sections checked both).
  std::string_view section_name(const Elf64_Shdr& section) const {
    return object_ + sections_[header_.e_shstrndx].sh_offset + section.sh_name;
  }

  // JITLink's eh-frame parser trusts the CIE augmentation string (it copies its P/L/R letters
  // into a 4-byte array), so only the shapes compilers emit pass: records inside the section,
  // CIE version 1 with an augmentation of "" or "z" then each of P, L, R at most once, and FDEs
  // pointing back at a CIE of this section.
  Status check_eh_frame(const Elf64_Shdr& section) const {
    const char* data = object_ + section.sh_offset;
    std::vector<uint64_t> cie_offsets;
    uint64_t offset = 0;
    while (offset < section.sh_size) {
      if (section.sh_size - offset < 4) return damaged("truncated .eh_frame record");
      uint64_t length = read<uint32_t>(section.sh_offset + offset);
      if (length == 0) {  // terminator
        offset += 4;
        continue;
      }
      if (length == 0xffffffff || length < 4 || length > section.sh_size - offset - 4) {
        return damaged(".eh_frame record length out of range");
      }
      uint64_t id_offset = offset + 4;
      uint32_t cie_delta = read<uint32_t>(section.sh_offset + id_offset);
      if (cie_delta == 0) {
        PRECAST_RETURN_IF_ERROR(check_cie(data + id_offset + 4, length - 4));
        cie_offsets.push_back(offset);
      } else if (cie_delta > id_offset || std::find(cie_offsets.begin(), cie_offsets.end(),
                                                    id_offset - cie_delta) == cie_offsets.end()) {
        return damaged(".eh_frame FDE without its CIE");
      }
      offset += 4 + length;
    }
    return Status::success();
  }

  // `body`: the CIE after its id field. Walks it to the end of the augmentation data.
  Status check_cie(const char* body, uint64_t size) const {
    ByteCursor cursor{reinterpret_cast<const uint8_t*>(body), size};
    uint8_t version = 0;
    if (!cursor.byte(version) || version != 1) return damaged(".eh_frame CIE version is not 1");
    std::string letters;
    for (uint8_t letter = 1; letter != 0;) {
      if (!cursor.byte(letter)) return damaged(".eh_frame CIE augmentation not terminated");
      if (letter != 0) letters += static_cast<char>(letter);
    }
    bool well_formed = letters.empty() || (letters[0] == 'z' && letters.size() <= 4);
    for (size_t i = 1; well_formed && i < letters.size(); ++i) {
      char letter = letters[i];
      well_formed = (letter == 'P' || letter == 'L' || letter == 'R') &&
                    letters.find(letter, i + 1) == std::string::npos;
    }
    if (!well_formed) return damaged(".eh_frame CIE augmentation is not z[PLR]");
    uint8_t return_register = 0;
    if (!cursor.leb128() || !cursor.leb128() || !cursor.byte(return_register) ||
        (!letters.empty() && !cursor.leb128())) {
      return damaged("truncated .eh_frame CIE");
    }
    for (size_t i = 1; i < letters.size(); ++i) {
      uint8_t encoding = 0;
      if (!cursor.byte(encoding)) return damaged("truncated .eh_frame CIE");
      uint64_t pointer_bytes = encoded_pointer_bytes(encoding);
      if (pointer_bytes == 0 || (letters[i] == 'R' && encoding == kPointerOmitted)) {
        return damaged(".eh_frame pointer encoding " + std::to_string(encoding));
      }
      if (letters[i] == 'P' && encoding != kPointerOmitted && !cursor.skip(pointer_bytes)) {
        return damaged("truncated .eh_frame CIE");
      }
    }
    return Status::success();
  }

  // Whether JITLink makes a graph symbol of `symbol`: a relocation against one it does not
  // makes JITLink format an error message that crashes in LLVM 19 (and means damage anyway).
  bool relocatable_target(const Elf64_Sym& symbol) const {
    uint8_t type = ELF64_ST_TYPE(symbol.st_info);
    uint8_t binding = ELF64_ST_BIND(symbol.st_info);
    if (type == STT_FILE) return false;
    if (symbol.st_shndx == SHN_COMMON) return true;
    if (symbol.st_shndx == SHN_UNDEF) {
      return binding == STB_GLOBAL || binding == STB_WEAK;
    }
    bool linkable_type = type == STT_NOTYPE || type == STT_FUNC || type == STT_OBJECT ||
                         type == STT_SECTION || type == STT_TLS;
    if (!linkable_type || symbol.st_shndx >= sections_.size()) return false;
    const Elf64_Shdr& section = sections_[symbol.st_shndx];
    return section.sh_type != SHT_NULL && !section_name(section).starts_with(".debug") &&
           (section.sh_flags & SHF_COMPRESSED) == 0;
  }

  // DW_EH_PE_omit.
  static constexpr uint8_t kPointerOmitted = 0xff;

  // Bytes of a pointer in a DWARF EH encoding JITLink can read, or 0 for one it cannot (its
  // reader stops at unreachable() on those). kPointerOmitted gives 1: allowed, reads nothing.
  static uint64_t encoded_pointer_bytes(uint8_t encoding) {
    if (encoding == kPointerOmitted) return 1;
    uint8_t application = encoding & 0x70;  // absolute or pc-relative only
    if (application != 0x00 && application != 0x10) return 0;
    switch (encoding & 0x0f) {
      case 0x0:
        return 8;  // absptr on a 64-bit target
      case 0x3:    // udata4
      case 0xb:
        return 4;  // sdata4
      case 0x4:    // udata8
      case 0xc:
        return 8;  // sdata8
      default:
        return 0;
    }
  }

  // Bounds-checked reads from a byte range.
  struct ByteCursor {
    const uint8_t* data;
    uint64_t size;
    uint64_t at = 0;
    bool byte(uint8_t& value) {
      if (at >= size) return false;
      value = data[at++];
      return true;
    }
    bool skip(uint64_t bytes) {
      if (bytes > size - at) return false;
      at += bytes;
      return true;
    }
    bool leb128() {  // ULEB128 or SLEB128: ends at a byte without the high bit
      for (uint8_t value = 0x80; value & 0x80;) {
        if (!byte(value)) return false;
      }
      return true;
    }
  };

  bool inside(uint64_t offset, uint64_t bytes) const {
    return offset <= size_ && bytes <= size_ - offset;
  }

  // The section `index` links to, which must have `type`.
  const Elf64_Shdr* linked(uint32_t index, uint32_t type) const {
    if (index == 0 || index >= sections_.size() || sections_[index].sh_type != type) {
      return nullptr;
    }
    return &sections_[index];
  }

  Status check_symbols(uint16_t index) {
    const Elf64_Shdr& table = sections_[index];
    const Elf64_Shdr* names = linked(table.sh_link, SHT_STRTAB);
    if (table.sh_entsize != sizeof(Elf64_Sym) || table.sh_size % sizeof(Elf64_Sym) != 0 ||
        names == nullptr) {
      return damaged("malformed symbol table");
    }
    uint64_t count = table.sh_size / sizeof(Elf64_Sym);
    if (table.sh_info > count) return damaged("malformed symbol table");
    for (uint64_t i = 0; i < count; ++i) {
      auto symbol = read<Elf64_Sym>(table.sh_offset + i * sizeof(Elf64_Sym));
      if (symbol.st_name >= names->sh_size && !(symbol.st_name == 0 && names->sh_size == 0)) {
        return damaged("symbol " + std::to_string(i) + " name outside the string table");
      }
      if (symbol.st_shndx == SHN_XINDEX) return damaged("extended section indices");
      if (symbol.st_shndx == SHN_UNDEF || symbol.st_shndx >= SHN_LORESERVE) continue;
      if (symbol.st_shndx >= sections_.size()) {
        return damaged("symbol " + std::to_string(i) + " in a section that does not exist");
      }
      uint64_t section_size = sections_[symbol.st_shndx].sh_size;
      if (symbol.st_value > section_size || symbol.st_size > section_size - symbol.st_value) {
        return damaged("symbol " + std::to_string(i) + " outside its section");
      }
    }
    return Status::success();
  }

  Status check_relocations(uint16_t index) {
    const Elf64_Shdr& table = sections_[index];
    bool with_addend = table.sh_type == SHT_RELA;
    uint64_t entry_size = with_addend ? sizeof(Elf64_Rela) : sizeof(Elf64_Rel);
    const Elf64_Shdr* symbols = linked(table.sh_link, SHT_SYMTAB);
    if (table.sh_entsize != entry_size || table.sh_size % entry_size != 0 || symbols == nullptr ||
        table.sh_info == 0 || table.sh_info >= sections_.size()) {
      return damaged("malformed relocation section " + std::to_string(index));
    }
    const Elf64_Shdr& target = sections_[table.sh_info];
    // JITLink skips relocations of debug and compressed sections.
    if (section_name(target).starts_with(".debug") || (target.sh_flags & SHF_COMPRESSED) != 0) {
      return Status::success();
    }
    uint64_t symbol_count = symbols->sh_size / sizeof(Elf64_Sym);
    uint64_t count = table.sh_size / entry_size;
    if (count > 0 && target.sh_type == SHT_NOBITS) {
      return damaged("relocations in a section without contents");
    }
    for (uint64_t i = 0; i < count; ++i) {
      // Elf64_Rel is the leading part of Elf64_Rela.
      auto relocation = read<Elf64_Rel>(table.sh_offset + i * entry_size);
      uint64_t symbol_index = ELF64_R_SYM(relocation.r_info);
      if (symbol_index >= symbol_count) {
        return damaged("relocation against a symbol that does not exist");
      }
      if (!relocatable_target(
              read<Elf64_Sym>(symbols->sh_offset + symbol_index * sizeof(Elf64_Sym)))) {
        return damaged("relocation against symbol " + std::to_string(symbol_index) +
                       ", which cannot be linked");
      }
      uint32_t type = ELF64_R_TYPE(relocation.r_info);
      FixupSpan span = header_.e_machine == EM_X86_64 ? x86_64_fixup(type) : aarch64_fixup(type);
      if (relocation.r_offset < span.before || target.sh_size < span.width ||
          relocation.r_offset > target.sh_size - span.width) {
        return damaged("relocation outside its section");
      }
    }
    return Status::success();
  }

  const char* object_;
  size_t size_;
  const std::string& name_;
  Elf64_Ehdr header_{};
  std::vector<Elf64_Shdr> sections_;
};

}  // namespace

Status check_elf_object(const char* object, size_t size, const std::string& object_name) {
  return ElfReader(object, size, object_name).check();
}

}  // namespace precast::runtime
