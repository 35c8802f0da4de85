// Tests of common/wire/keyfile.h, the CURVE key-file reader the agent and the viewers share: good key files in
// every layout the format allows, and each way a key file or a clients file is wrong, with an error that names the
// file and the reason. (tst_client checks the Z85 rule against libzmq's own decoder.)
#include "wire/keyfile.h"

#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <sys/stat.h>

using namespace memscope;

namespace {

// The example key pair of ZeroMQ's zmq_curve(7).
constexpr char PublicKey[] = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
constexpr char SecretKey[] = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6";

} // namespace

class TestKeyFile : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;

    // Writes `text` to NAME in the temporary folder with `mode`; its path.
    std::string write(const QString& name, const QByteArray& text, unsigned mode)
    {
        const QString path = m_dir.filePath(name);
        QFile file(path);
        if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate) || file.write(text) != text.size())
            return {};
        file.close();
        if (::chmod(QFile::encodeName(path).constData(), mode_t(mode)) != 0)
            return {};
        return path.toStdString();
    }

private Q_SLOTS:
    void z85_data()
    {
        QTest::addColumn<QByteArray>("key");
        QTest::addColumn<bool>("valid");
        QTest::newRow("public key of zmq_curve(7)") << QByteArray(PublicKey) << true;
        QTest::newRow("all zeros") << QByteArray(40, '0') << true;
        // "%%%%%" is 82 * (85^4 + 85^3 + 85^2 + 85 + 1), above 2^32 - 1: no four bytes encode as it.
        QTest::newRow("a group above 2^32 - 1") << QByteArray(35, '0') + "%%%%%" << false;
        QTest::newRow("the largest group") << QByteArray(35, '0') + "%nSc0" << true; // 2^32 - 1 (RFC 32)
        QTest::newRow("a character outside the alphabet") << QByteArray(39, '0') + "~" << false;
        QTest::newRow("a quote") << QByteArray(39, '0') + "\"" << false;
        QTest::newRow("39 characters") << QByteArray(39, '0') << false;
        QTest::newRow("41 characters") << QByteArray(41, '0') << false;
        QTest::newRow("empty") << QByteArray() << false;
    }
    void z85()
    {
        QFETCH(QByteArray, key);
        QFETCH(bool, valid);
        QCOMPARE(wire::isZ85Key(std::string_view(key.constData(), size_t(key.size()))), valid);
    }

    // A key file: what it holds, its mode, how it is read, and the key read or the error's text after "PATH: ".
    void keyFile_data()
    {
        QTest::addColumn<QByteArray>("text");
        QTest::addColumn<unsigned>("mode");
        QTest::addColumn<bool>("secret");
        QTest::addColumn<QString>("key");
        QTest::addColumn<QString>("error");
        const QByteArray pub(PublicKey), sec(SecretKey);
        QTest::newRow("a public key alone") << pub + "\n" << 0644u << false << QString::fromLatin1(pub) << QString();
        QTest::newRow("without a newline") << pub << 0644u << false << QString::fromLatin1(pub) << QString();
        QTest::newRow("comments and blank lines first")
            << "# memscope CURVE public key\n\n   \n# another\n" + pub + "\n# after\n"
            << 0644u << false << QString::fromLatin1(pub) << QString();
        QTest::newRow("CRLF and spaces around") << "\t " + pub + "  \r\n"
                                                << 0644u << false << QString::fromLatin1(pub) << QString();
        QTest::newRow("only the first key counts") << pub + "\nnot a key\n"
                                                   << 0644u << false << QString::fromLatin1(pub) << QString();
        QTest::newRow("a secret key, mode 0600") << sec + "\n"
                                                 << 0600u << true << QString::fromLatin1(sec) << QString();
        QTest::newRow("a secret key, mode 0400") << sec + "\n"
                                                 << 0400u << true << QString::fromLatin1(sec) << QString();
        QTest::newRow("a public key file others may read") << pub + "\n"
                                                           << 0644u << false << QString::fromLatin1(pub) << QString();
        QTest::newRow("a group-readable secret key")
            << sec + "\n"
            << 0640u << true << QString()
            << QStringLiteral("the secret key file is readable by group or others (mode 0640); refusing it (chmod 600 "
                              "it)");
        QTest::newRow("a world-readable secret key")
            << sec + "\n"
            << 0604u << true << QString()
            << QStringLiteral("the secret key file is readable by group or others (mode 0604); refusing it (chmod 600 "
                              "it)");
        QTest::newRow("a short key") << QByteArray("# comment\n\nshort\n") << 0644u << false << QString()
                                     << QStringLiteral("not a CURVE key (expected 40 Z85 characters on the first line "
                                                       "that is not empty or a comment, got 5 characters)");
        QTest::newRow("40 characters that are not Z85")
            << QByteArray(39, '0') + "~\n"
            << 0644u << false << QString()
            << QStringLiteral("not a CURVE key (expected 40 Z85 characters on the first line that is not empty or a "
                              "comment, got 40 characters that are not Z85)");
        QTest::newRow("a group above 2^32 - 1")
            << QByteArray(35, '0') + "%%%%%\n"
            << 0644u << false << QString()
            << QStringLiteral("not a CURVE key (expected 40 Z85 characters on the first line that is not empty or a "
                              "comment, got 40 characters that are not Z85)");
        QTest::newRow("nothing but comments")
            << QByteArray("# nothing but a comment\n\n") << 0600u << true << QString()
            << QStringLiteral("no key in the file (expected 40 Z85 characters on the first line that is not empty or "
                              "a comment)");
        QTest::newRow("empty") << QByteArray() << 0644u << false << QString()
                               << QStringLiteral("no key in the file (expected 40 Z85 characters on the first line "
                                                 "that is not empty or a comment)");
    }
    void keyFile()
    {
        QFETCH(QByteArray, text);
        QFETCH(unsigned, mode);
        QFETCH(bool, secret);
        QFETCH(QString, key);
        QFETCH(QString, error);
        const std::string path = write(QStringLiteral("key"), text, mode);
        QVERIFY(!path.empty());
        const wire::KeyResult r = wire::readKeyFile(path, secret ? wire::KeyKind::Secret : wire::KeyKind::Public);
        QCOMPARE(QString::fromStdString(r.key), key);
        QCOMPARE(QString::fromStdString(r.error),
                 error.isEmpty() ? QString() : QString::fromStdString(path) + QLatin1String(": ") + error);
        QCOMPARE(r.ok(), error.isEmpty());
    }

    void keyFileThatIsNotOne()
    {
        const wire::KeyResult missing
            = wire::readKeyFile(m_dir.filePath(QStringLiteral("missing")).toStdString(), wire::KeyKind::Public);
        QCOMPARE(missing.error,
                 m_dir.filePath(QStringLiteral("missing")).toStdString()
                     + ": cannot open the key file: No such file or directory");
        const wire::KeyResult folder = wire::readKeyFile(m_dir.path().toStdString(), wire::KeyKind::Secret);
        QCOMPARE(folder.error, m_dir.path().toStdString() + ": not a key file (not a regular file)");
        QVERIFY(folder.key.empty());
    }

    // A clients file: the keys read, or the error's text after "PATH: ".
    void clientKeys_data()
    {
        QTest::addColumn<QByteArray>("text");
        QTest::addColumn<QStringList>("keys");
        QTest::addColumn<QString>("error");
        const QByteArray pub(PublicKey), other(QByteArray(40, '0'));
        QTest::newRow("one key") << pub + "\n" << QStringList { QString::fromLatin1(pub) } << QString();
        QTest::newRow("two keys, comments, blank lines and CRLF")
            << "# viewers\r\n" + pub + "\r\n\r\n  # the CI's\r\n" + other
            << QStringList { QString::fromLatin1(pub), QString::fromLatin1(other) } << QString();
        QTest::newRow("a bad line among the keys")
            << pub + "\nnot a key\n"
            << QStringList()
            << QStringLiteral(
                   "line 2 is not a Z85-encoded 32-byte client public key (40 characters; one per line, '#' comments)");
        QTest::newRow("no key") << QByteArray("# nobody yet\n") << QStringList()
                                << QStringLiteral(
                                       "lists no client public keys (one Z85 key of 40 characters per line)");
        QTest::newRow("empty") << QByteArray() << QStringList()
                               << QStringLiteral("lists no client public keys (one Z85 key of 40 characters per line)");
    }
    void clientKeys()
    {
        QFETCH(QByteArray, text);
        QFETCH(QStringList, keys);
        QFETCH(QString, error);
        const std::string path = write(QStringLiteral("clients"), text, 0644);
        QVERIFY(!path.empty());
        const wire::KeyListResult r = wire::readClientKeys(path);
        QStringList read;
        for (const std::string& k : r.keys)
            read << QString::fromStdString(k);
        QCOMPARE(read, keys);
        QCOMPARE(QString::fromStdString(r.error),
                 error.isEmpty() ? QString() : QString::fromStdString(path) + QLatin1String(": ") + error);
        const wire::KeyListResult missing = wire::readClientKeys(path + ".missing");
        QCOMPARE(missing.error, path + ".missing: cannot open the key file: No such file or directory");
    }
};

QTEST_GUILESS_MAIN(TestKeyFile)
#include "tst_keyfile.moc"
