// Which frames a user reads (model/framefilter.h): the site rule as a table over real frames (C++ frames from
// ../shared's mlp_train, recorded with PyTorch's default stacks="all"; Windows paths; the interpreter's; PyTorch's
// own Python; torch.compile's generated code; model libraries), the site of every stack of real snapshots, and the
// insights that lead with it: on a snapshot with C++ frames, every top consumer names the user's line (or, for the
// autograd engine's native-only stacks, the backward node that ran), and no two read the same.
#include "io/snapshotio.h"
#include "model/forwardframes.h"
#include "model/framefilter.h"
#include "model/replay.h"
#include "report/insights.h"
#include "report/memoryviz.h"
#include "testutil.h"

#include <QtTest>

#include <set>

using namespace memscope;
using namespace memscope::model;

class TestFrameFilter : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void internalFrames_data();
    void internalFrames();
    void sitesOfRealStacks_data();
    void sitesOfRealStacks();
    void insightsNameTheUsersLine_data();
    void insightsNameTheUsersLine();
    void windowsPathsAreShortened();
    void tracebackLines_data();
    void tracebackLines();
    void forwardFramesNameTheForwardLine();
};

void TestFrameFilter::internalFrames_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("file");
    QTest::addColumn<bool>("internal");
    // From mlp_train.pickle (stacks="all"), innermost first.
    QTest::newRow("unwinder") << "torch::unwind::unwind()" << "??" << true;
    QTest::newRow("gather") << "torch::cuda::(anonymous namespace)::gather_with_cpp()" << "memory_snapshot.cpp" << true;
    QTest::newRow("allocator")
        << "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(unsigned long, CUstream_st*)"
        << "CUDACachingAllocator.cpp" << true;
    QTest::newRow("no file") << "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"
                             << "" << true;
    QTest::newRow("dispatcher") << "c10::impl::wrap_kernel_functor_unboxed_<...>::call" << "RegisterCUDA_0.cpp" << true;
    QTest::newRow("autograd") << "torch::autograd::VariableType::(anonymous namespace)::_to_copy" << "VariableType_0.cpp"
                              << true;
    QTest::newRow("bindings") << "torch::autograd::THPVariable_cuda(_object*, _object*, _object*)"
                              << "python_variable_methods.cpp" << true;
    QTest::newRow("cpython C") << "_PyEval_EvalFrameDefault" << "??" << true;
    QTest::newRow("libc") << "__libc_start_main" << "??" << true;
    QTest::newRow("header") << "std::function<void ()>::operator()() const" << "/usr/include/c++/12/bits/std_function.h"
                            << true;
    QTest::newRow("shared object") << "at::native::empty_cuda" << "/opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so"
                                   << true;
    QTest::newRow("torch module") << "_apply" << "venv/lib/python3.12/site-packages/torch/nn/modules/module.py" << true;
    QTest::newRow("torch functional") << "dropout" << "/usr/lib/python3/dist-packages/torch/nn/functional.py" << true;
    QTest::newRow("user script") << "mlp_train" << "/work/steering/tools/gen_snapshots.py" << false;
    // The interpreter's own code.
    QTest::newRow("stdlib") << "_run_module_as_main" << "/usr/lib/python3.11/runpy.py" << true;
    QTest::newRow("pyenv stdlib") << "run" << "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py" << true;
    QTest::newRow("frozen") << "_call_with_frames_removed" << "<frozen importlib._bootstrap>" << true;
    QTest::newRow("exec'd code") << "<module>" << "<string>" << false;
    QTest::newRow("notebook cell") << "<module>" << "/tmp/ipykernel_1234/3456.py" << false;
    // Model libraries are the user's answer too.
    QTest::newRow("transformers") << "forward"
                                  << "/opt/venv/lib/python3.12/site-packages/transformers/models/llama/modeling_llama.py"
                                  << false;
    QTest::newRow("timm") << "forward" << "/usr/local/lib/python3.12/dist-packages/timm/models/vision_transformer.py"
                          << false;
    // torch.compile's generated code and memscope's own frames.
    QTest::newRow("inductor output") << "call" << "/tmp/torchinductor_root/ab/cabc123.py" << true;
    QTest::newRow("memscope wrapper") << "backward" << "/usr/share/memscope/python/memscope_torch.py" << true;
    QTest::newRow("engine frame") << "backward" << "<autograd engine>" << true;
    // Windows.
    QTest::newRow("windows user") << "update_nodes" << "C:\\research\\gnn\\models.py" << false;
    QTest::newRow("windows stdlib") << "run"
                                    << "C:\\Users\\ana\\AppData\\Local\\Programs\\Python\\Python311\\Lib\\threading.py"
                                    << true;
    QTest::newRow("windows torch") << "_call_impl"
                                   << "C:\\Users\\ana\\venv\\Lib\\site-packages\\torch\\nn\\modules\\module.py" << true;
    QTest::newRow("windows library") << "forward"
                                     << "C:\\Users\\ana\\venv\\Lib\\site-packages\\transformers\\models\\gpt2\\modeling_gpt2.py"
                                     << false;
}

void TestFrameFilter::internalFrames()
{
    QFETCH(QString, name);
    QFETCH(QString, file);
    QFETCH(bool, internal);
    QCOMPARE(isInternalFrame(name.toStdString(), file.toStdString()), internal);
}

void TestFrameFilter::sitesOfRealStacks_data()
{
    QTest::addColumn<QString>("path");
    QTest::addColumn<QString>("userFile"); // the one file of the user's code the sites must name ("" any)
    QTest::newRow("mlp_train (C++ frames)") << QString::fromStdString(test::snapshotPath("mlp_train.pickle"))
                                            << "gen_snapshots.py";
    QTest::newRow("transformer_train") << QString::fromStdString(test::snapshotPath("transformer_train.pickle"))
                                       << "gen_snapshots.py";
    QTest::newRow("multistream") << QString::fromStdString(test::snapshotPath("multistream.pickle"))
                                 << "gen_snapshots.py";
}

void TestFrameFilter::sitesOfRealStacks()
{
    // Every stack of these files holds a frame of the script that made them: its site is such a frame, whatever
    // native, interpreter or PyTorch frames lie below it.
    QFETCH(QString, path);
    QFETCH(QString, userFile);
    const io::LoadResult r = io::loadSnapshot(path.toStdString());
    QVERIFY2(r.ok(), r.error.message.c_str());
    const Snapshot& s = *r.snapshot;
    size_t stacks = 0;
    for (uint32_t k = 0; k < s.stackCount(); ++k) {
        const StackId stack { k };
        if (s.stackSize(stack) == 0)
            continue;
        bool hasUser = false;
        for (const FrameId* f = s.stackBegin(stack); f != s.stackEnd(stack); ++f)
            hasUser |= std::string_view(s.str(s.frame(*f).filename)).ends_with(userFile.toStdString());
        if (!hasUser)
            continue;
        ++stacks;
        const int site = siteIndex(s, stack);
        QVERIFY(site >= 0);
        const Frame& f = s.frame(s.stackBegin(stack)[site]);
        QVERIFY2(std::string_view(s.str(f.filename)).ends_with(userFile.toStdString()),
                 (std::string(s.str(f.filename)) + ":" + std::string(s.str(f.name))).c_str());
        // ... and it is the innermost one.
        for (int i = 0; i < site; ++i)
            QVERIFY(!std::string_view(s.str(s.frame(s.stackBegin(stack)[i]).filename))
                         .ends_with(userFile.toStdString()));
    }
    QVERIFY(stacks > 0);
}

void TestFrameFilter::insightsNameTheUsersLine_data()
{
    // Real files with C++ frames (PyTorch's default stacks="all"): ../shared's mlp_train (an H100), and from the
    // corpus a HuggingFace GPT-2 and a timm ResNet (an H200), each with the file its job ran from.
    QTest::addColumn<QString>("path");
    QTest::addColumn<QString>("script");
    QTest::newRow("mlp_train") << QString::fromStdString(test::snapshotPath("mlp_train.pickle")) << "gen_snapshots.py:";
    QTest::newRow("hf_gpt2_cpp") << QString::fromStdString(test::dataPath("corpus/hf_gpt2_cpp.pickle"))
                                 << "make_corpus.py:";
    QTest::newRow("timm_cpp") << QString::fromStdString(test::dataPath("corpus/timm_cpp.pickle")) << "make_corpus.py:";
}

void TestFrameFilter::insightsNameTheUsersLine()
{
    // With C++ frames the top consumers must still name the script's lines, each row its own.
    QFETCH(QString, path);
    QFETCH(QString, script);
    const std::string marker = script.toStdString();
    const io::LoadResult r = io::loadSnapshot(path.toStdString());
    QVERIFY2(r.ok(), r.error.message.c_str());
    const std::vector<Replay> replays = Replay::buildAll(*r.snapshot);
    const report::Insights in = report::computeInsights(*r.snapshot, replays);
    std::set<std::string> titles;
    size_t consumers = 0;
    for (const report::Insight& it : in.items) {
        if (it.kind != report::InsightKind::TopConsumer)
            continue;
        ++consumers;
        // The script's line; or, for the autograd engine's allocations (native frames only), the node that ran.
        const bool user = it.title.find(marker) != std::string::npos;
        QVERIFY2(user || it.title.find("Backward") != std::string::npos, it.title.c_str());
        QVERIFY2(it.title.find("CUDACachingAllocator") == std::string::npos, it.title.c_str());
        if (user)
            QVERIFY2(it.detail.rfind("  at " + marker, 0) == 0, it.detail.c_str());
        QVERIFY2(titles.insert(it.title.substr(it.title.find(" from "))).second, it.title.c_str());
    }
    QVERIFY(consumers >= 2);
    // With the filter off, the raw innermost frames come first again.
    report::InsightOptions raw;
    raw.frameFilter = false;
    const report::Insights unfiltered = report::computeInsights(*r.snapshot, replays, raw);
    for (const report::Insight& it : unfiltered.items)
        if (it.kind == report::InsightKind::TopConsumer)
            QVERIFY2(it.title.find(marker) == std::string::npos || it.title.find(" <- ") != std::string::npos,
                     it.title.c_str());
}

void TestFrameFilter::windowsPathsAreShortened()
{
    Snapshot s;
    const Frame windows { s.strings.intern("update_nodes"), s.strings.intern("C:\\research\\gnn\\models.py"),
                          LineNumber(174) };
    QCOMPARE(report::displayFrame(s, windows), std::string("models.py:174:update_nodes"));
    // PyTorch's own format cuts at '/' only, and the parity outputs keep it.
    QCOMPARE(report::formatFrame(s, windows), std::string("C:\\research\\gnn\\models.py:174:update_nodes"));
    const Frame posix { s.strings.intern("f"), s.strings.intern("/home/u/train.py"), LineNumber(3) };
    QCOMPARE(report::displayFrame(s, posix), std::string("train.py:3:f"));
    // A native frame without a file (PyTorch's unwinder says "??"): the function alone.
    const Frame native { s.strings.intern("torch::autograd::generated::AddmmBackward0::apply(std::vector<at::Tensor, "
                                          "std::allocator<at::Tensor> >&&)"),
                         s.strings.intern("??"), LineNumber(0) };
    QCOMPARE(report::displayFrame(s, native), std::string("torch::autograd::generated::AddmmBackward0::apply"));
}

void TestFrameFilter::tracebackLines_data()
{
    // forward_frames strings as CPython's traceback.format_list writes them.
    QTest::addColumn<QString>("text");
    QTest::addColumn<bool>("ok");
    QTest::addColumn<QString>("file");
    QTest::addColumn<qulonglong>("line");
    QTest::addColumn<QString>("name");
    QTest::newRow("with source") << "  File \"/home/u/model.py\", line 12, in forward\n    y = self.fc(x)\n" << true
                                 << "/home/u/model.py" << qulonglong(12) << "forward";
    QTest::newRow("without source") << "  File \"train.py\", line 7, in <module>\n" << true << "train.py"
                                    << qulonglong(7) << "<module>";
    QTest::newRow("Windows path with spaces") << "  File \"C:\\My Work\\net.py\", line 301, in run\n" << true
                                              << "C:\\My Work\\net.py" << qulonglong(301) << "run";
    QTest::newRow("line past int64") << "  File \"x.py\", line 18446744073709551615, in f\n" << true << "x.py"
                                     << qulonglong(18446744073709551615ull) << "f";
    QTest::newRow("no File") << "Traceback (most recent call last):\n" << false << "" << qulonglong(0) << "";
    QTest::newRow("no line number") << "  File \"x.py\", line , in f\n" << false << "" << qulonglong(0) << "";
    QTest::newRow("no name") << "  File \"x.py\", line 3\n" << false << "" << qulonglong(0) << "";
    QTest::newRow("empty") << "" << false << "" << qulonglong(0) << "";
}

void TestFrameFilter::tracebackLines()
{
    QFETCH(QString, text);
    QFETCH(bool, ok);
    const std::string t = text.toStdString();
    const auto parsed = parseTracebackLine(t);
    QCOMPARE(parsed.has_value(), ok);
    if (!ok)
        return;
    QFETCH(QString, file);
    QFETCH(qulonglong, line);
    QFETCH(QString, name);
    QCOMPARE(QString::fromStdString(std::string(parsed->filename)), file);
    QCOMPARE(parsed->line, LineNumber::fromUnsigned(line));
    QCOMPARE(QString::fromStdString(std::string(parsed->name)), name);
}

void TestFrameFilter::forwardFramesNameTheForwardLine()
{
    // A real trace made under anomaly mode (tests/data/corpus/anomaly_forward_frames.pickle, an H200): PyTorch
    // wrote forward_frames on 250 of its 289 entries. Recorded with Python stacks, its backward allocations have no
    // frames of their own: without the forward stacks half the peak read "<no stack recorded>".
    const io::LoadResult r = io::loadSnapshot(test::dataPath("corpus/anomaly_forward_frames.pickle"));
    QVERIFY2(r.ok(), r.error.message.c_str());
    const Snapshot& s = *r.snapshot;
    size_t withForward = 0;
    for (const TraceEntry& e : s.deviceTraces[0]) {
        const StackId f = s.forwardStack(e);
        if (f == EmptyStack)
            continue;
        ++withForward;
        // Innermost first: the user's line that ran the forward, under PyTorch's own frames.
        const int site = siteIndex(s, f);
        QVERIFY(site >= 0);
        const Frame& fr = s.frame(s.stackBegin(f)[site]);
        QCOMPARE(std::string(s.str(fr.filename)).substr(std::string(s.str(fr.filename)).rfind('/') + 1),
                 std::string("make_corpus.py"));
        QCOMPARE(std::string(s.str(s.frame(s.stackEnd(f)[-1]).name)), std::string("<module>"));
    }
    QCOMPARE(withForward, size_t(250));
    // The file is written back unchanged: forward_frames stay among the entries' unknown keys.
    QCOMPARE(report::memoryFolded(s).empty(), false);

    const std::vector<Replay> replays = Replay::buildAll(s);
    const report::Insights in = report::computeInsights(s, replays);
    std::vector<const report::Insight*> consumers;
    for (const report::Insight& it : in.items)
        if (it.kind == report::InsightKind::TopConsumer)
            consumers.push_back(&it);
    QVERIFY(!consumers.empty());
    const report::Insight& first = *consumers.front();
    QVERIFY2(first.title.find("from the backward of make_corpus.py:433:anomaly_forward_frames via linear.py:")
                 != std::string::npos,
             first.title.c_str());
    QVERIFY(first.forwardStack != EmptyStack);
    QVERIFY2(first.detail.find("in the backward of (the forward pass") != std::string::npos, first.detail.c_str());
    for (const report::Insight* it : consumers)
        QVERIFY2(it->title.find("<no stack recorded>") == std::string::npos || it->share < 0.05, it->title.c_str());
}

QTEST_GUILESS_MAIN(TestFrameFilter)
#include "tst_framefilter.moc"
