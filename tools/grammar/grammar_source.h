// grammar_source.h — the grammar of a CLI run: --grammar, --grammar-file, --json-schema,
// --json-schema-file (as llama.cpp's llama-cli names them), compiled once before a model loads.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "text/grammar.h"

namespace kvrun::tools {

/// The grammar options of a command (at most one may be given).
struct GrammarSource {
  std::string grammar;           ///< --grammar: GBNF text
  std::string grammar_file;      ///< --grammar-file: a .gbnf file
  std::string json_schema;       ///< --json-schema: a JSON Schema as JSON text
  std::string json_schema_file;  ///< --json-schema-file: a JSON Schema file
};

/// A bad grammar option; what() is one line naming the option and the problem, e.g.
/// "--grammar-file g.gbnf: line 3, column 9: undefined rule 'item'".
class GrammarSourceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The compiled grammar, or null when no option is set. Throws GrammarSourceError (two options
/// at once, an unreadable file, invalid JSON, an unsupported schema keyword, invalid GBNF).
std::shared_ptr<const Grammar> compile_grammar_source(const GrammarSource& src);

}  // namespace kvrun::tools
