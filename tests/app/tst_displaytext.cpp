// What the views show of a snapshot's text (app/style/displaytext.h): short text as it is, text longer than
// MaxDisplayChars cut on a character boundary with how much is left out, so that a hostile or generated name of
// megabytes never reaches Qt's text layout whole; the frame labels of the call tree and flame graph go through it.
#include "document/session.h"
#include "itemmodels/calltreemodel.h"
#include "style/displaytext.h"

#include <QTest>

#include <string>

using namespace memscope;
using namespace memscope::app;

class TestDisplayText : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void cut_data()
    {
        QTest::addColumn<QByteArray>("utf8");
        QTest::addColumn<QString>("expected");
        QTest::newRow("short") << QByteArray("train.py:12:forward") << QStringLiteral("train.py:12:forward");
        QTest::newRow("exactly the limit") << QByteArray(MaxDisplayChars, 'a') << QString(MaxDisplayChars, u'a');
        QTest::newRow("one more byte")
            << QByteArray(MaxDisplayChars + 1, 'a') << QString(MaxDisplayChars, u'a') + QStringLiteral("… (1 more bytes)");
        // A 3-byte character (€) across the limit: the cut goes before it, never through it.
        QByteArray euro(MaxDisplayChars - 1, 'b');
        euro += "\xE2\x82\xAC";
        euro += "tail";
        QTest::newRow("no cut inside a character")
            << euro << QString(MaxDisplayChars - 1, u'b') + QStringLiteral("… (7 more bytes)");
    }
    void cut()
    {
        QFETCH(QByteArray, utf8);
        QFETCH(QString, expected);
        QCOMPARE(displayText(std::string_view(utf8.constData(), size_t(utf8.size()))), expected);
    }

    // A 64 MiB function name (as a hostile file carried: the app hung in text shaping) in the labels every view
    // shows: bounded, and still saying whose name it is.
    void hugeFrameName()
    {
        model::Snapshot s;
        const std::string name = "forward" + std::string(size_t(64) << 20, 'x');
        model::Frame f;
        f.name = s.strings.intern(name);
        f.filename = s.strings.intern("/src/model.py");
        f.line = 7;
        s.frames.push_back(f);
        for (const QString& label : { frameLabel(s, model::FrameId(0)), frameFullText(s, model::FrameId(0)),
                                      frameDisplayLabel(s, model::FrameId(0)),
                                      shortFunctionName(s, model::FrameId(0)) }) {
            QVERIFY2(label.size() <= MaxDisplayChars + 64, qPrintable(QString::number(label.size())));
            QVERIFY(label.contains(QStringLiteral("forwardxxx")));
            QVERIFY(label.contains(QStringLiteral("more bytes)")));
        }
    }

    // Byte counts as every view writes them (Session::formatBytes; the segment map's labels share the unit rule):
    // whole bytes under 1 KiB, then the largest binary unit keeping the value at or above 1, two decimals under 10.
    void formatBytes_data()
    {
        QTest::addColumn<qint64>("bytes");
        QTest::addColumn<QString>("expected");
        QTest::newRow("zero") << qint64(0) << QStringLiteral("0 B");
        QTest::newRow("just under a KiB") << qint64(1023) << QStringLiteral("1023 B");
        QTest::newRow("one KiB") << qint64(1024) << QStringLiteral("1.00 KiB");
        QTest::newRow("1.5 MiB") << (qint64(3) << 19) << QStringLiteral("1.50 MiB");
        QTest::newRow("ten MiB: one decimal") << (qint64(10) << 20) << QStringLiteral("10.0 MiB");
        QTest::newRow("a freed block (negative)") << -(qint64(3) << 29) << QStringLiteral("-1.50 GiB");
        QTest::newRow("past PiB stays in PiB") << (qint64(2048) << 50) << QStringLiteral("2048.0 PiB");
    }
    void formatBytes()
    {
        QFETCH(qint64, bytes);
        QFETCH(QString, expected);
        QCOMPARE(Session::formatBytes(bytes), expected);
        const ScaledBytes b = scaleBytes(bytes);
        QCOMPARE(b.whole, expected.endsWith(QLatin1String(" B")));
    }
};

QTEST_GUILESS_MAIN(TestDisplayText)
#include "tst_displaytext.moc"
