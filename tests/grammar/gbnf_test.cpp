// GBNF parsing (syntax, precise errors) and whole-text acceptance/rejection on grammars written
// for these tests in the styles of llama.cpp's grammars/ examples (arithmetic, JSON, lists,
// chess moves, Japanese text, a C subset), checked byte by byte through the automaton.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "helpers.hpp"

using namespace grammar_test;

namespace {

struct sample {
  const char* text;
  bool ok;
};

void check_all(std::string_view gbnf, const std::vector<sample>& samples) {
  auto a = compile(gbnf);
  for (const auto& s : samples) {
    const std::string text = s.text;
    CAPTURE(text);
    CHECK(accepts(*a, s.text) == s.ok);
  }
}

}  // namespace

TEST_CASE("gbnf: literals, classes, alternation, grouping") {
  check_all(R"g(root ::= "ab" [c-e] ("x" | "yz") [^0-9])g",
            {{"abcxq", true}, {"abeyz-", true}, {"abfx-", false}, {"abcx5", false}, {"abcyq", false}, {"abcx", false}});
  check_all("root ::= .", {{"a", true}, {"\xC3\xA9", true}, {"\xF0\x9F\x99\x82", true}, {"", false}, {"ab", false}});
  check_all(R"g(root ::= [\x41-\x43\u00e9] "\t\n\\\"\[\]")g",
            {{"B\t\n\\\"[]", true}, {"\xC3\xA9\t\n\\\"[]", true}, {"D\t\n\\\"[]", false}});
  check_all(R"g(root ::= [-a] [a-] [\-\^] [^^])g", {{"-a-x", true}, {"aa^b", true}, {"b--x", false}, {"--a^", false}, {"a--^", false}});
}

TEST_CASE("gbnf: repetition operators") {
  check_all(R"g(root ::= "a"* "b"+ "c"?)g",
            {{"b", true}, {"aaabbc", true}, {"bbbb", true}, {"", false}, {"ac", false}, {"bcc", false}});
  check_all(R"g(root ::= "ab"{2} [0-9]{1,3} "x"{2,})g",
            {{"abab1xx", true}, {"abab123xxxx", true}, {"ab1xx", false}, {"abab1234xx", false}, {"abab1x", false}});
  check_all(R"g(root ::= ("a" | "bc"){0,2} "!")g", {{"!", true}, {"a!", true}, {"bca!", true}, {"aaa!", false}});
  check_all(R"g(root ::= [0-9]{ 3 , 3 })g", {{"123", true}, {"12", false}, {"1234", false}});
  check_all(R"g(root ::= ("x" "y"?)+)g", {{"x", true}, {"xyxxy", true}, {"yx", false}, {"xyy", false}});
}

TEST_CASE("gbnf: comments, line breaks, recursion") {
  check_all(R"g(# a comment
root ::= item ("," item)*   # trailing comment
item ::= (
    "[" root "]"   # nested lists, newlines inside parentheses
  | [a-z]+
)
)g",
            {{"a", true}, {"a,[b,c],d", true}, {"[[x]]", true}, {"[a", false}, {"a,", false}, {"", false}});
  check_all("root ::= \"a\" |\n  \"b\" |\n  \"c\"\n", {{"a", true}, {"c", true}, {"d", false}});
  check_all("root ::= x\r\nx ::= \"y\"\r\n", {{"y", true}, {"x", false}});
  // right recursion runs in constant stack depth
  auto a = compile(R"g(root ::= "a" root | "b")g");
  CHECK(accepts(*a, std::string(5000, 'a') + "b"));
}

TEST_CASE("gbnf: UTF-8 in literals and classes, partial characters") {
  check_all("root ::= \"\xC3\xA9t\xC3\xA9\" [\xE3\x81\x81-\xE3\x82\x9F]+",
            {{"\xC3\xA9t\xC3\xA9\xE3\x81\x82\xE3\x81\x84", true}, {"\xC3\xA9t\xC3\xA9", false}, {"ete\xE3\x81\x82", false}});
  auto a = compile("root ::= [\xE3\x81\x81-\xE3\x82\x9F]");
  CHECK(viable(*a, "\xE3"));       // could still become a hiragana character
  CHECK(viable(*a, "\xE3\x81"));
  CHECK_FALSE(viable(*a, "\xE4"));  // U+4000 and up: outside the class
  CHECK_FALSE(viable(*a, "\xE3\x84"));
  // Invalid UTF-8 never matches, even under `.` or a negated class.
  check_all("root ::= [^a]*", {{"\xC0\x80", false}, {"\xED\xA0\x80", false}, {"\xF4\x90\x80\x80", false}, {"\x80", false},
                               {"b\xC3\xA9", true}});
  auto any = compile("root ::= .*");
  CHECK_FALSE(viable(*any, "\xC1"));
  CHECK_FALSE(viable(*any, "\xE0\x80"));  // overlong 3-byte form
  CHECK_FALSE(viable(*any, "\xED\xA0"));  // surrogate
  CHECK(viable(*any, "\xF0\x9F"));
}

TEST_CASE("gbnf: arithmetic equations") {
  check_all(R"g(# integer arithmetic, one equation per line
root    ::= line+
line    ::= sum ws "=" ws int "\n"
sum     ::= product (ws [+-] ws product)*
product ::= factor (ws [*/] ws factor)*
factor  ::= int | "(" ws sum ws ")"
int     ::= "-"? [0-9]{1,6}
ws      ::= " "?
)g",
            {{"1+2=3\n", true}, {"(1 + 2) * 3 = 9\n4/2=2\n", true}, {"-5*-5=25\n", true}, {"1+=2\n", false},
             {"1234567=1\n", false}, {"(1+2=3\n", false}, {"1+2=3", false}});
}

namespace {
constexpr const char* json_gbnf = R"g(
root   ::= value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( "," ws member )* )? "}"
member ::= string ws ":" ws value ws
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \t\n]{0,8}
)g";
}

TEST_CASE("gbnf: JSON") {
  check_all(json_gbnf, {{R"g({"a": [1, -2.5e3, true, null], "b": {"c": "d\n\u00e9"}})g", true},
                        {"[]", true},
                        {"\"\xE6\x97\xA5\xE6\x9C\xAC\"", true},
                        {R"g({"a" : 1 , "b":2})g", true},
                        {"{\"a\":1,}", false},
                        {"[01]", false},
                        {"\"tab\there\"", false},
                        {R"g("\x")g", false},
                        {"{\"a\":         1}", false},  // 9 spaces: ws is bounded to 8
                        {"12345678901234567", false}});  // 17 digits: the mantissa is bounded
}

TEST_CASE("gbnf: lists, chess moves, a C subset") {
  check_all(R"g(root ::= ("- " [^\n]+ "\n")+)g", {{"- milk\n- eggs\n", true}, {"- \n", false}, {"milk\n", false}});
  check_all(R"g(
root   ::= "1. " turn ("\n" [1-9] [0-9]? ". " turn)*
turn   ::= move " " move
move   ::= (piece? file? rank? "x"? square promo? | "O-O" "-O"?) [+#]?
piece  ::= [KQRBN]
file   ::= [a-h]
rank   ::= [1-8]
square ::= file rank
promo  ::= "=" [QRBN]
)g",
            {{"1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6", true}, {"1. O-O O-O-O+", true}, {"1. e9 e5", false}, {"1. e4", false}});
  check_all(R"g(
root      ::= (decl ws)+
decl      ::= type ws ident ws "(" ws ")" ws "{" ws (stmt ws)* "}"
stmt      ::= type ws ident ws "=" ws expr ws ";" | "return" ws expr ws ";"
expr      ::= term (ws [-+*/] ws term)*
term      ::= ident | [0-9]+ | "(" ws expr ws ")"
type      ::= "int" | "void"
ident     ::= [a-zA-Z_] [a-zA-Z_0-9]*
ws        ::= [ \t\n]*
)g",
            {{"int main() { int x = 2 * (3 + y); return x; }", true}, {"int f(){return 1;}\nvoid g(){}", true},
             {"int main() { return; }", false}, {"main() {}", false}});
}

TEST_CASE("gbnf: a start rule other than root") {
  auto a = compile_gbnf("a ::= \"x\" b\nb ::= \"y\"", byte_trie(), {.root = "a"});
  CHECK(accepts(*a, "xy"));
}

namespace {
struct bad_grammar {
  const char* text;
  const char* message;  // expected what(), exactly
};
}  // namespace

TEST_CASE("gbnf: errors name the line, the column and the rule") {
  const std::vector<bad_grammar> cases = {
      {"", "grammar: no rule named 'root' (the start rule)"},
      {"main ::= \"x\"", "grammar: no rule named 'root' (the start rule)"},
      {"root ::= item\nitem ::= \"a\" itme", "grammar: line 2, column 14 (rule 'item'): undefined rule 'itme'"},
      {"root ::= \"abc", "grammar: line 1, column 10 (rule 'root'): unterminated string literal"},
      {"root ::= [a-z", "grammar: line 1, column 10 (rule 'root'): unterminated character class"},
      {"root ::= [z-a]", "grammar: line 1, column 11 (rule 'root'): character range z-a is reversed"},
      {"root ::= []", "grammar: line 1, column 10 (rule 'root'): empty character class"},
      {"root ::= \"\\q\"", "grammar: line 1, column 11 (rule 'root'): unknown escape 'q' (known: \\n \\r \\t \\\\ \\\" \\[ \\] \\- \\^ \\x \\u \\U)"},
      {"root ::= \"\\x4\"", "grammar: line 1, column 11 (rule 'root'): escape needs 2 hex digits, found '\"'"},
      {"root ::= \"\\U00110000\"", "grammar: line 1, column 11 (rule 'root'): code point above U+10FFFF"},
      {"root ::= ( \"a\" ", "grammar: line 1, column 10 (rule 'root'): unclosed '(': expected ')' before end of input"},
      {"root ::= \"a\" )", "grammar: line 1, column 14 (rule 'root'): unexpected ')'"},
      {"root ::= * \"a\"", "grammar: line 1, column 10 (rule 'root'): '*' has nothing to repeat"},
      {"root ::= \"\"+", "grammar: line 1, column 12 (rule 'root'): '+' has nothing to repeat"},
      {"root ::= \"a\"{3,2}", "grammar: line 1, column 13 (rule 'root'): repetition {3,2} has min > max"},
      {"root ::= \"a\"{2", "grammar: line 1, column 15 (rule 'root'): expected '}' to close the repetition, found end of input"},
      {"root ::= \"a\"{x}", "grammar: line 1, column 14 (rule 'root'): expected a repetition count, found 'x'"},
      {"root ::= \"a\"{99999999}", "grammar: line 1, column 14 (rule 'root'): repetition count is too large"},
      {"root \"a\"", "grammar: line 1, column 6 (rule 'root'): expected '::=' after the rule name, found '\"'"},
      {"root ::= \"a\"\n  | \"b\"", "grammar: line 2, column 3 (rule 'root'): a line cannot start with '|'; put the '|' at the end of the previous line"},
      {"root ::= \"a\"\nroot ::= \"b\"", "grammar: line 2, column 1 (rule 'root'): rule 'root' is defined twice (first at line 1)"},
      {"root ::= <think>", "grammar: line 1, column 10 (rule 'root'): token references (<...>, !<...>) are not supported"},
      {"root ::= \"\xFF\"", "grammar: line 1, column 11 (rule 'root'): invalid UTF-8 byte 0xFF"},
      {"root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"",
       "grammar: line 2, column 1 (rule 'expr'): left recursion: expr -> expr can reach itself without consuming a character"},
      {"root ::= a\na ::= b? \"x\" | b\nb ::= \"y\"? a",
       "grammar: line 2, column 1 (rule 'a'): left recursion: a -> a_1 -> b -> a can reach itself without consuming a character"},
  };
  for (const auto& c : cases) {
    const std::string text = c.text;
    CAPTURE(text);
    try {
      (void)parse_gbnf(c.text);
      FAIL("no error for: " << c.text);
    } catch (const grammar_error& e) {
      CHECK(std::string(e.what()) == std::string(c.message));
    }
  }
}

TEST_CASE("gbnf: grammar_error fields") {
  try {
    (void)parse_gbnf("root ::= x\nx ::= \"a\" [b");
    FAIL("expected an error");
  } catch (const grammar_error& e) {
    CHECK(e.line() == 2);
    CHECK(e.column() == 11);
    CHECK(e.rule() == "x");
  }
}

TEST_CASE("gbnf: the size guard stops repetition bombs") {
  CHECK_THROWS_WITH_AS(parse_gbnf("root ::= \"a\"{0,1500000}"),
                       doctest::Contains("grammar is too large"), grammar_error);
}
