// Tests of io::parseJson (common/io/jsonreader.cpp): valid documents (nesting, escapes, surrogate pairs, numbers)
// rendered back from the ValueTree, invalid ones checked for their error code and byte offset, the progress
// callback, and real snapshots loaded from JSON giving the same model as from their pickle. Test thread only.
#include "io/jsonreader.h"
#include "io/snapshotio.h"
#include "model/snapshot.h"
#include "testutil.h"

#include <QDir>
#include <QTest>

#include <charconv>
#include <cstring>
#include <string>

using namespace memscope;

namespace {

std::span<const uint8_t> bytesOf(const QByteArray& a)
{
    return { reinterpret_cast<const uint8_t*>(a.constData()), static_cast<size_t>(a.size()) };
}

// A canonical rendering of a ValueTree node: JSON-like, strings as their raw bytes, floats as F(shortest digits).
void render(const io::ValueTree& tree, io::NodeId n, std::string& out)
{
    switch (tree.type(n)) {
    case io::NodeType::None: out += "null"; return;
    case io::NodeType::Bool: out += tree.boolean(n) ? "true" : "false"; return;
    case io::NodeType::Int: out += std::to_string(tree.integer(n)); return;
    case io::NodeType::UInt: out += "U(" + std::to_string(tree.unsignedInteger(n)) + ")"; return;
    case io::NodeType::BigInt: out += "Big@" + std::to_string(tree.bigIntOffset(n)); return;
    case io::NodeType::Float: {
        char buf[40];
        const auto r = std::to_chars(buf, buf + sizeof buf, tree.real(n));
        out += "F(";
        out.append(buf, r.ptr);
        out += ')';
        return;
    }
    case io::NodeType::String:
    case io::NodeType::Bytes:
        out += '"';
        out += tree.string(n);
        out += '"';
        return;
    case io::NodeType::List:
    case io::NodeType::Tuple:
    case io::NodeType::Dict: {
        const bool dict = tree.type(n) == io::NodeType::Dict;
        out += dict ? '{' : '[';
        size_t i = 0;
        tree.forEachChild(n, [&](io::NodeId c) {
            if (i > 0)
                out += dict && i % 2 == 1 ? ':' : ',';
            render(tree, c, out);
            ++i;
        });
        out += dict ? '}' : ']';
        return;
    }
    }
}

QStringList realSnapshots()
{
    const QDir dir(QString::fromStdString(test::snapshotPath("")));
    return dir.entryList({ QStringLiteral("*.pickle") }, QDir::Files, QDir::Name);
}

} // namespace

class TestJsonReader : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void parsesValidDocuments_data()
    {
        QTest::addColumn<QByteArray>("json");
        QTest::addColumn<QByteArray>("rendered");

        QTest::newRow("empty object") << QByteArray("{}") << QByteArray("{}");
        QTest::newRow("empty array") << QByteArray("[]") << QByteArray("[]");
        QTest::newRow("nested objects and arrays")
            << QByteArray("{\"a\":[1,{\"b\":[]},[[]]],\"c\":{\"d\":null,\"e\":{}}}")
            << QByteArray("{\"a\":[1,{\"b\":[]},[[]]],\"c\":{\"d\":null,\"e\":{}}}");
        QTest::newRow("whitespace everywhere") << QByteArray(" \r\n\t{ \"a\" :\n[ true ,false\t] }\n ")
                                               << QByteArray("{\"a\":[true,false]}");
        QTest::newRow("literals") << QByteArray("[true,false,null]") << QByteArray("[true,false,null]");
        QTest::newRow("top-level scalar") << QByteArray(" 42 ") << QByteArray("42");
        QTest::newRow("top-level string") << QByteArray("\"x\"") << QByteArray("\"x\"");
        QTest::newRow("byte order mark skipped") << QByteArray("\xEF\xBB\xBF[1]") << QByteArray("[1]");
        QTest::newRow("duplicate keys all kept") << QByteArray("{\"a\":1,\"a\":2}") << QByteArray("{\"a\":1,\"a\":2}");
        QTest::newRow("simple escapes") << QByteArray("[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"]")
                                        << QByteArray("[\"\"\\/\b\f\n\r\t\"]");
        QTest::newRow("escape between plain text") << QByteArray("[\"ab\\ncd\"]") << QByteArray("[\"ab\ncd\"]");
        QTest::newRow("unicode escapes in the BMP") << QByteArray("[\"\\u0041\\u00e9\\u4E2D\"]")
                                                    << QByteArray("[\"A\xC3\xA9\xE4\xB8\xAD\"]");
        QTest::newRow("escaped NUL") << QByteArray("[\"a\\u0000b\"]") << QByteArray("[\"a\0b\"]", 7);
        QTest::newRow("surrogate pair") << QByteArray("[\"\\ud83d\\ude00\"]") << QByteArray("[\"\xF0\x9F\x98\x80\"]");
        QTest::newRow("lone high surrogate kept as Python's surrogatepass bytes")
            << QByteArray("[\"\\ud800x\"]") << QByteArray("[\"\xED\xA0\x80x\"]");
        QTest::newRow("lone low surrogate") << QByteArray("[\"\\udc80\"]") << QByteArray("[\"\xED\xB2\x80\"]");
        QTest::newRow("raw UTF-8 passes through") << QByteArray("[\"\xC3\xA9\xF0\x9F\x98\x80\"]")
                                                  << QByteArray("[\"\xC3\xA9\xF0\x9F\x98\x80\"]");
        QTest::newRow("negative integer") << QByteArray("[-42,0,-0]") << QByteArray("[-42,0,0]");
        QTest::newRow("int64 limits") << QByteArray("[9223372036854775807,-9223372036854775808]")
                                      << QByteArray("[9223372036854775807,-9223372036854775808]");
        QTest::newRow("64-bit address") << QByteArray("[140323521036288]") << QByteArray("[140323521036288]");
        // Unsigned 64-bit values are exact (torch.compile's frame lines are 2^64 - 1); wider ones are placeholders
        // that say where they were, for the builder to leave that one field out.
        QTest::newRow("2^63 and 2^64 - 1 are unsigned ints")
            << QByteArray("[9223372036854775808,18446744073709551615]")
            << QByteArray("[U(9223372036854775808),U(18446744073709551615)]");
        QTest::newRow("2^64 is wider than 64 bits")
            << QByteArray("[1,18446744073709551616]") << QByteArray("[1,Big@3]");
        QTest::newRow("-2^63 - 1 is wider than 64 bits")
            << QByteArray("{\"a\":-9223372036854775809}") << QByteArray("{\"a\":Big@5}");
        QTest::newRow("a 40-digit integer")
            << QByteArray("[1234567890123456789012345678901234567890]") << QByteArray("[Big@1]");
        QTest::newRow("fraction and exponent") << QByteArray("[1.5,-2.5e-3,1E+2,0.1,2e0,0.0]")
                                               << QByteArray("[F(1.5),F(-0.0025),F(100),F(0.1),F(2),F(0)]");
        QTest::newRow("integer digits with a fraction stay a float beyond 64 bits")
            << QByteArray("[12345678901234567890123.0]") << QByteArray("[F(1.2345678901234568e+22)]");
        QTest::newRow("huge exponent overflows to infinity") << QByteArray("[1e999,-1e999]")
                                                             << QByteArray("[F(inf),F(-inf)]");
        QTest::newRow("tiny exponent underflows to zero") << QByteArray("[1e-999,0.000001e-400]")
                                                          << QByteArray("[F(0),F(0)]");
        QTest::newRow("leading zeros in a fraction before a big exponent")
            << QByteArray("[0.0000001e310]") << QByteArray("[F(1e+303)]");
        QTest::newRow("512 levels deep is allowed") << QByteArray(512, '[') + QByteArray(512, ']')
                                                    << QByteArray(512, '[') + QByteArray(512, ']');
        QTest::newRow("segment_pool_id arrives as a list") << QByteArray("{\"segment_pool_id\":[1,0]}")
                                                           << QByteArray("{\"segment_pool_id\":[1,0]}");
    }
    void parsesValidDocuments()
    {
        QFETCH(QByteArray, json);
        QFETCH(QByteArray, rendered);
        io::ValueTree tree(bytesOf(json));
        io::NodeId root = io::NoNode;
        const io::Error err = io::parseJson(bytesOf(json), tree, root);
        QVERIFY2(!err, err.toString().c_str());
        QVERIFY(root != io::NoNode);
        std::string out;
        render(tree, root, out);
        QCOMPARE(QByteArray::fromStdString(out), rendered);
    }

    void plainStringsPointIntoTheInput()
    {
        const QByteArray json("[\"plain\",\"esc\\naped\",{\"key\":\"key\"}]");
        io::ValueTree tree(bytesOf(json));
        io::NodeId root = io::NoNode;
        QVERIFY(!io::parseJson(bytesOf(json), tree, root));
        std::vector<io::NodeId> items;
        tree.forEachChild(root, [&](io::NodeId c) { items.push_back(c); });
        QCOMPARE(items.size(), size_t(3));
        auto inInput = [&](std::string_view s) {
            return s.data() >= json.constData() && s.data() + s.size() <= json.constData() + json.size();
        };
        QVERIFY(inInput(tree.string(items[0])));
        QCOMPARE(tree.string(items[1]), std::string_view("esc\naped"));
        QVERIFY(!inInput(tree.string(items[1])));
        QCOMPARE(tree.string(tree.find(items[2], "key")), std::string_view("key"));
    }

    void repeatedKeysShareOneNode()
    {
        const QByteArray json("[{\"action\":1},{\"action\":2}]");
        io::ValueTree tree(bytesOf(json));
        io::NodeId root = io::NoNode;
        QVERIFY(!io::parseJson(bytesOf(json), tree, root));
        std::vector<io::NodeId> keys;
        tree.forEachChild(root, [&](io::NodeId obj) {
            tree.forEachItem(obj, [&](io::NodeId k, io::NodeId) { keys.push_back(k); });
        });
        QCOMPARE(keys.size(), size_t(2));
        QCOMPARE(keys[0], keys[1]); // the SnapshotBuilder then resolves each distinct key once
    }

    void rejectsInvalidDocuments_data()
    {
        QTest::addColumn<QByteArray>("json");
        QTest::addColumn<int>("code");
        QTest::addColumn<qint64>("offset");

        const int truncated = int(io::ErrorCode::Truncated);
        const int corrupt = int(io::ErrorCode::Corrupt);
        QTest::newRow("whitespace only") << QByteArray(" \n ") << truncated << qint64(3);
        QTest::newRow("truncated object") << QByteArray("{\"a\":1") << truncated << qint64(6);
        QTest::newRow("truncated after a key") << QByteArray("{\"a\"") << truncated << qint64(4);
        QTest::newRow("truncated array") << QByteArray("[1,2,") << truncated << qint64(5);
        QTest::newRow("truncated string") << QByteArray("[\"abc") << truncated << qint64(5);
        QTest::newRow("truncated escape") << QByteArray("[\"a\\") << truncated << qint64(4);
        QTest::newRow("truncated unicode escape") << QByteArray("[\"\\u12") << truncated << qint64(6);
        QTest::newRow("truncated literal") << QByteArray("[tru") << truncated << qint64(4);
        QTest::newRow("truncated fraction") << QByteArray("[1.") << truncated << qint64(3);
        QTest::newRow("lone minus") << QByteArray("-") << truncated << qint64(1);
        QTest::newRow("trailing garbage") << QByteArray("{} x") << corrupt << qint64(3);
        QTest::newRow("two documents") << QByteArray("{}{}") << corrupt << qint64(2);
        QTest::newRow("unknown escape") << QByteArray("[\"\\x41\"]") << corrupt << qint64(2);
        QTest::newRow("unicode escape with a non-hex digit") << QByteArray("[\"\\u12G4\"]") << corrupt << qint64(2);
        QTest::newRow("unescaped control character") << QByteArray("[\"a\nb\"]") << corrupt << qint64(3);
        QTest::newRow("leading zero") << QByteArray("[01]") << corrupt << qint64(1);
        QTest::newRow("fraction without digits") << QByteArray("[1.e5]") << corrupt << qint64(3);
        QTest::newRow("exponent without digits") << QByteArray("[1e+]") << corrupt << qint64(4);
        QTest::newRow("plus sign") << QByteArray("[+1]") << corrupt << qint64(1);
        QTest::newRow("missing colon") << QByteArray("{\"a\" 1}") << corrupt << qint64(5);
        QTest::newRow("missing comma") << QByteArray("[1 2]") << corrupt << qint64(3);
        QTest::newRow("trailing comma in an array") << QByteArray("[1,]") << corrupt << qint64(3);
        QTest::newRow("trailing comma in an object") << QByteArray("{\"a\":1,}") << corrupt << qint64(7);
        QTest::newRow("mismatched bracket") << QByteArray("[1}") << corrupt << qint64(2);
        QTest::newRow("single-quoted string") << QByteArray("['a']") << corrupt << qint64(1);
        QTest::newRow("non-string key") << QByteArray("{1:2}") << corrupt << qint64(1);
        QTest::newRow("misspelt literal") << QByteArray("[nul]") << corrupt << qint64(1);
        QTest::newRow("NaN is not JSON") << QByteArray("[NaN]") << corrupt << qint64(1);
        QTest::newRow("a pickle is not JSON") << QByteArray("\x80\x04\x95") << corrupt << qint64(0);
        QTest::newRow("1000 levels deep") << QByteArray(1000, '[') + QByteArray(1000, ']')
                                          << int(io::ErrorCode::TooDeep) << qint64(512);
        QTest::newRow("1000 objects deep") << QByteArray("{\"a\":").repeated(1000) << int(io::ErrorCode::TooDeep)
                                           << qint64(512 * 5);
    }
    void rejectsInvalidDocuments()
    {
        QFETCH(QByteArray, json);
        QFETCH(int, code);
        QFETCH(qint64, offset);
        io::ValueTree tree(bytesOf(json));
        io::NodeId root = io::NoNode;
        const io::Error err = io::parseJson(bytesOf(json), tree, root);
        QCOMPARE(int(err.code), code);
        QVERIFY(!err.message.empty());
        QVERIFY(err.hasOffset);
        QVERIFY(err.offset <= uint64_t(json.size()));
        QCOMPARE(qint64(err.offset), offset);
    }

    void progressIsReportedAndCanCancel()
    {
        // About 3 MB: the callback runs about once per MB.
        QByteArray json("[");
        json += QByteArray("{\"name\":\"forward\",\"filename\":\"/opt/torch/nn/modules/linear.py\",\"line\":134},")
                    .repeated(40000);
        json += "0]";
        int calls = 0;
        uint64_t last = 0;
        io::ProgressFn count = [&](uint64_t done, uint64_t total) {
            ++calls;
            last = done;
            return done <= total;
        };
        {
            io::ValueTree tree(bytesOf(json));
            io::NodeId root = io::NoNode;
            QVERIFY(!io::parseJson(bytesOf(json), tree, root, count));
            QVERIFY(calls >= 2);
            QVERIFY(last <= uint64_t(json.size()));
        }
        io::ProgressFn cancel = [](uint64_t, uint64_t) { return false; };
        io::ValueTree tree(bytesOf(json));
        io::NodeId root = io::NoNode;
        const io::Error err = io::parseJson(bytesOf(json), tree, root, cancel);
        QCOMPARE(err.code, io::ErrorCode::Cancelled);
        QVERIFY(err.offset >= (1u << 20));
    }

    void loadsSnapshotsFromJson()
    {
        QByteArray json("{'segments':[{'device':0,'address':1024,'total_size':2048,'allocated_size':512,"
                        "'active_size':512,'requested_size':500,'stream':0,'segment_type':'small',"
                        "'segment_pool_id':[1,0],'is_expandable':false,'frames':[],'blocks':["
                        "{'address':1024,'size':512,'requested_size':500,'state':'active_allocated',"
                        "'frames':[{'name':'f','filename':'a.py','line':3}]},"
                        "{'address':1536,'size':1536,'requested_size':0,'state':'inactive','frames':[]}]}],"
                        "'device_traces':[[{'action':'oom','device_free':7,'size':9,'stream':0,"
                        "'time_us':5,'compile_context':'N/A','user_metadata':''}]]}");
        json.replace('\'', '"'); // the source writes JSON's double quotes as single quotes
        const io::LoadResult r = io::loadSnapshotFromMemory(bytesOf(json), "inline.json");
        QVERIFY2(r.ok(), r.error.toString().c_str());
        const model::Snapshot& s = *r.snapshot;
        QCOMPARE(s.segments.size(), size_t(1));
        QCOMPARE(s.segments[0].poolId, (std::pair<int64_t, int64_t>(1, 0)));
        QCOMPARE(s.blocks.size(), size_t(2));
        QCOMPARE(s.stackSize(s.blocks[0].stack), 1u);
        QCOMPARE(s.str(s.frame(*s.stackBegin(s.blocks[0].stack)).filename), std::string_view("a.py"));
        QCOMPARE(s.deviceTraces.size(), size_t(1));
        QCOMPARE(s.deviceTraces[0][0].action, model::Action::Oom);
        QCOMPARE(s.deviceTraces[0][0].addr, int64_t(7));
    }

    void jsonErrorsNameTheFile()
    {
        const QByteArray json("{\"segments\": [1, 2");
        const io::LoadResult r = io::loadSnapshotFromMemory(bytesOf(json), "cut.json");
        QVERIFY(!r.ok());
        QCOMPARE(r.error.code, io::ErrorCode::Truncated);
        QVERIFY(r.error.toString().find("cut.json") != std::string::npos);
    }

    // The same snapshot from JSON and from its pickle is the same model: compared through the pickle writer, whose
    // bytes depend only on the model's content (strings, frames and stacks by value, in file order), and by counts.
    void jsonSnapshotEqualsPickleSnapshot_data()
    {
        QTest::addColumn<QString>("file");
        const QStringList files = realSnapshots();
        if (files.isEmpty())
            QSKIP("no snapshots in ../shared/snapshots (MEMSCOPE_SHARED_DIR)");
        for (const QString& f : files)
            QTest::newRow(qPrintable(f)) << f;
    }
    void jsonSnapshotEqualsPickleSnapshot()
    {
        QFETCH(QString, file);
        const io::LoadResult fromPickle = io::loadSnapshot(test::snapshotPath(file.toStdString()));
        QVERIFY2(fromPickle.ok(), fromPickle.error.toString().c_str());
        const std::string json = io::encodeJson(*fromPickle.snapshot);
        const io::LoadResult fromJson = io::loadSnapshotFromMemory(
            { reinterpret_cast<const uint8_t*>(json.data()), json.size() }, file.toStdString() + ".json");
        QVERIFY2(fromJson.ok(), fromJson.error.toString().c_str());
        const model::Snapshot& a = *fromPickle.snapshot;
        const model::Snapshot& b = *fromJson.snapshot;
        QCOMPARE(b.segments.size(), a.segments.size());
        QCOMPARE(b.blocks.size(), a.blocks.size());
        QCOMPARE(b.entryCount(), a.entryCount());
        QCOMPARE(b.annotations.size(), a.annotations.size());
        QCOMPARE(b.frames.size(), a.frames.size());
        QCOMPARE(b.stackCount(), a.stackCount());
        QCOMPARE(b.streams, a.streams);
        QVERIFY(io::encodePickle(b) == io::encodePickle(a));
    }
};

QTEST_GUILESS_MAIN(TestJsonReader)
#include "tst_jsonreader.moc"
