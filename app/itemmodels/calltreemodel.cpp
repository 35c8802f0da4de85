// CallTreeModel: rows map 1:1 to CallTree nodes (CallTreeItemModel's navigation). Frame texts are formatted once per
// frame and cached. See calltreemodel.h. GUI thread only.
#include "itemmodels/calltreemodel.h"

#include "style/displaytext.h"
#include "document/session.h"
#include "report/memoryviz.h"

#include <QGuiApplication>
#include <QLocale>
#include <QPalette>
#include <QSortFilterProxyModel>
#include <QStringBuilder>

namespace memscope::app {

using model::CallNode;
using model::CallNodeId;
using model::FrameId;

namespace {

    QString fromStd(std::string_view s) { return displayText(s); }

    QString pseudoLabel(FrameId frame)
    {
        if (frame == model::NoStackFrame)
            return QCoreApplication::translate("CallTreeModel", "<no stack recorded>");
        if (frame == model::HiddenFramesFrame)
            return QCoreApplication::translate("CallTreeModel", "<every frame hidden by the frame filter>");
        return QCoreApplication::translate("CallTreeModel", "all live allocations");
    }

    // FNV-1a: stable across runs and machines (qHash is seeded per process).
    uint32_t stableHash(std::string_view s)
    {
        uint32_t h = 2166136261u;
        for (unsigned char c : s)
            h = (h ^ c) * 16777619u;
        // Spread the low bits, which pick the hue.
        h ^= h >> 15;
        h *= 0x2c1b3c6du;
        h ^= h >> 12;
        return h;
    }

    bool isPythonFile(std::string_view file) { return file.size() >= 3 && file.substr(file.size() - 3) == ".py"; }

    const QLocale& numberLocale()
    {
        static const QLocale locale(QLocale::English, QLocale::UnitedStates);
        return locale;
    }

} // namespace

QString frameLabel(const model::Snapshot& snapshot, FrameId frame)
{
    if (model::isPseudoFrame(frame))
        return pseudoLabel(frame);
    return fromStd(report::displayFrame(snapshot, snapshot.frame(frame)));
}

QString frameFullText(const model::Snapshot& snapshot, FrameId frame)
{
    if (model::isPseudoFrame(frame))
        return pseudoLabel(frame);
    return fromStd(report::formatFrame(snapshot, snapshot.frame(frame), true));
}

QString frameDisplayLabel(const model::Snapshot& snapshot, FrameId frame)
{
    if (model::isPseudoFrame(frame))
        return pseudoLabel(frame);
    const model::Frame& f = snapshot.frame(frame);
    std::string_view file = snapshot.str(f.filename);
    if (file.empty() || file == "??") // a native frame the unwinder found no file for: its function alone
        return shortFunctionName(snapshot, frame);
    if (const size_t slash = file.find_last_of("/\\"); slash != std::string_view::npos) // Windows paths too
        file.remove_prefix(slash + 1);
    return fromStd(file) + QLatin1Char(':') + QString::fromStdString(f.line.toString()) + QLatin1Char(':')
        + shortFunctionName(snapshot, frame);
}

QString shortFunctionName(const model::Snapshot& snapshot, FrameId frame)
{
    if (model::isPseudoFrame(frame))
        return pseudoLabel(frame);
    const std::string_view name = snapshot.str(snapshot.frame(frame).name);
    // Only C++ names are shortened: Python's "<module>" or "<lambda>" are names, not template arguments.
    if (name.find("::") == std::string_view::npos && name.find('(') == std::string_view::npos)
        return fromStd(name);
    std::string out;
    out.reserve(name.size());
    int angle = 0, paren = 0;
    for (size_t i = 0; i < name.size(); ++i) {
        const char c = name[i];
        // "operator<", "operator()" and friends are names, not brackets.
        if (angle == 0 && paren == 0 && name.substr(i).starts_with("operator")) {
            size_t j = i + 8;
            if (name.substr(j).starts_with("()"))
                j += 2;
            else
                while (j < name.size() && j < i + 11
                       && std::string_view("<>=!+-*/%&|^~[]").find(name[j]) != std::string_view::npos)
                    ++j;
            out += name.substr(i, j - i);
            i = j - 1;
            continue;
        }
        if (angle == 0 && paren == 0 && name.substr(i).starts_with("(anonymous namespace)")) {
            out += "(anonymous)";
            i += std::string_view("(anonymous namespace)").size() - 1;
            continue;
        }
        if (c == '<' && paren == 0) {
            if (angle++ == 0)
                out += "<\u2026";
            continue;
        }
        if (c == '>' && paren == 0 && angle > 0) {
            if (--angle == 0)
                out += '>';
            continue;
        }
        if (c == '(' && angle == 0) {
            if (paren++ == 0)
                out += "(\u2026";
            continue;
        }
        if (c == ')' && angle == 0 && paren > 0) {
            if (--paren == 0)
                out += ')';
            continue;
        }
        if (angle == 0 && paren == 0)
            out += c;
    }
    return QString::fromStdString(out);
}

QColor frameColor(const model::Snapshot& snapshot, FrameId frame, FrameColoring coloring, bool dark)
{
    if (model::isPseudoFrame(frame))
        return dark ? QColor(0x55, 0x55, 0x5a) : QColor(0xc8, 0xc8, 0xcc);
    const model::Frame& f = snapshot.frame(frame);
    const std::string_view file = snapshot.str(f.filename);
    const uint32_t h = stableHash(coloring == FrameColoring::ByFile ? file : snapshot.str(f.name));
    const double lightness = (dark ? 0.36 : 0.66) + double((h >> 8) % 9) / 100.0;
    const double saturation = (dark ? 0.42 : 0.55) + double((h >> 16) % 20) / 100.0;
    if (coloring == FrameColoring::ByFile)
        return QColor::fromHslF(float(h % 360) / 360.f, float(saturation), float(lightness));
    // flamegraph.pl's palettes: "hot" (red to yellow) for native code, "aqua" (teal to blue) for Python.
    const double hue = isPythonFile(file) ? 170.0 + double(h % 50) : double(h % 55);
    return QColor::fromHslF(float(hue / 360.0), float(saturation), float(lightness));
}

CallTreeModel::CallTreeModel(QObject* parent)
    : CallTreeItemModel(ColumnCount, parent)
{
}

void CallTreeModel::setTree(std::shared_ptr<const model::Snapshot> snapshot,
                            std::shared_ptr<const model::CallTree> tree)
{
    beginResetModel();
    if (snapshot != m_snapshot) {
        m_labels.clear();
        m_fullTexts.clear();
    }
    m_snapshot = std::move(snapshot);
    setCallTree(std::move(tree));
    if (m_snapshot) {
        m_labels.resize(m_snapshot->frames.size());
        m_fullTexts.resize(m_snapshot->frames.size());
    }
    endResetModel();
}

const QString& CallTreeModel::label(FrameId frame) const
{
    if (model::isPseudoFrame(frame) || !m_snapshot) {
        static const QString none = pseudoLabel(model::NoStackFrame), hidden = pseudoLabel(model::HiddenFramesFrame),
                             root = pseudoLabel(model::RootFrame);
        return frame == model::NoStackFrame ? none : frame == model::HiddenFramesFrame ? hidden : root;
    }
    QString& l = m_labels[model::raw(frame)];
    if (l.isNull())
        l = frameDisplayLabel(*m_snapshot, frame);
    return l;
}

const QString& CallTreeModel::fullText(FrameId frame) const
{
    if (model::isPseudoFrame(frame) || !m_snapshot)
        return label(frame);
    QString& t = m_fullTexts[model::raw(frame)];
    if (t.isNull())
        t = frameFullText(*m_snapshot, frame);
    return t;
}

QVariant CallTreeModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || index.model() != this)
        return {};
    const CallNodeId id = nodeOf(index);
    const CallNode& n = tree().node(id);
    const int64_t total = tree().root().bytes;
    const double percent = total != 0 ? 100.0 * double(n.bytes) / double(std::abs(total)) : 0.0;
    switch (role) {
    case Qt::DisplayRole:
        switch (index.column()) {
        case FunctionColumn:
            return label(n.frame);
        case BytesColumn:
            return Session::formatBytes(n.bytes);
        case CountColumn:
            return numberLocale().toString(qlonglong(n.count));
        case PercentColumn:
            return QString(QString::number(percent, 'f', 1) + QLatin1String(" %"));
        case SelfBytesColumn:
            return Session::formatBytes(n.selfBytes);
        }
        break;
    case SortRole:
        switch (index.column()) {
        case FunctionColumn:
            return label(n.frame);
        case BytesColumn:
            return qlonglong(n.bytes);
        case CountColumn:
            return qlonglong(n.count);
        case PercentColumn:
            return percent;
        case SelfBytesColumn:
            return qlonglong(n.selfBytes);
        }
        break;
    case Qt::TextAlignmentRole:
        if (index.column() != FunctionColumn)
            return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
        break;
    case Qt::DecorationRole:
        // The frame's flame-graph colour, so the two views read alike.
        if (index.column() == FunctionColumn && m_snapshot)
            return frameColor(*m_snapshot, n.frame, FrameColoring::ByFunction,
                              QGuiApplication::palette().color(QPalette::Base).lightnessF() < 0.5);
        break;
    case Qt::ToolTipRole: {
        const QString& text = fullText(n.frame);
        return tr("%1\n%2 (%3 B) in %4 allocations, %5 % of live\nself: %6 (%7 B) in %8 allocations")
            .arg(text, Session::formatBytes(n.bytes), numberLocale().toString(qlonglong(n.bytes)),
                 numberLocale().toString(qlonglong(n.count)), QString::number(percent, 'f', 2),
                 Session::formatBytes(n.selfBytes), numberLocale().toString(qlonglong(n.selfBytes)),
                 numberLocale().toString(qlonglong(n.selfCount)));
    }
    case FilterRole:
        return fullText(n.frame);
    case NodeRole:
        return uint(model::raw(id));
    case BytesRole:
        return qlonglong(n.bytes);
    case CountRole:
        return qlonglong(n.count);
    case SelfBytesRole:
        return qlonglong(n.selfBytes);
    case SelfCountRole:
        return qlonglong(n.selfCount);
    case PercentRole:
        return percent;
    case SamplesRole:
        return uint(n.samples);
    case KeyRole:
        return uint(n.key);
    default:
        break;
    }
    return {};
}

QVariant CallTreeModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal)
        return {};
    if (role == Qt::DisplayRole) {
        switch (section) {
        case FunctionColumn:
            return tr("Function");
        case BytesColumn:
            return tr("Bytes");
        case CountColumn:
            return tr("Count");
        case PercentColumn:
            return tr("% of live");
        case SelfBytesColumn:
            return tr("Self bytes");
        }
    } else if (role == Qt::ToolTipRole) {
        switch (section) {
        case FunctionColumn:
            return tr("The frame, as PyTorch's memory viewer prints it: file:line:function");
        case BytesColumn:
            return tr("Bytes of the live blocks allocated under this call path (inclusive)");
        case CountColumn:
            return tr("Live blocks allocated under this call path");
        case PercentColumn:
            return tr("Inclusive bytes as a share of all live bytes shown");
        case SelfBytesColumn:
            return tr("Bytes of the live blocks whose call path ends here");
        }
    }
    return {};
}

QSortFilterProxyModel* makeCallTreeProxy(CallTreeModel* source, QObject* parent)
{
    auto* proxy = new QSortFilterProxyModel(parent);
    proxy->setSourceModel(source);
    proxy->setSortRole(CallTreeModel::SortRole);
    proxy->setFilterRole(CallTreeModel::FilterRole);
    proxy->setFilterKeyColumn(CallTreeModel::FunctionColumn);
    proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);
    // Qt 6: a row is kept when any descendant matches, so a match deep in a stack shows with its callers.
    proxy->setRecursiveFilteringEnabled(true);
    proxy->sort(CallTreeModel::BytesColumn, Qt::DescendingOrder);
    return proxy;
}

} // namespace memscope::app
