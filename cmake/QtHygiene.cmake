# memscope_qt_hygiene(target): the Qt defines every Qt target compiles with (STYLE.md): no implicit char* <-> QString
# conversions, QStringBuilder for `+`, Q_SIGNALS/Q_SLOTS/Q_EMIT instead of the bare keywords, no Q_FOREACH, no
# narrowing in connect(). PRIVATE: the defines shape the target's own sources, not its users'.
function(memscope_qt_hygiene target)
    target_compile_definitions(${target} PRIVATE
        QT_NO_CAST_FROM_ASCII
        QT_NO_CAST_TO_ASCII
        QT_NO_CAST_FROM_BYTEARRAY
        QT_USE_QSTRINGBUILDER
        QT_NO_KEYWORDS
        QT_NO_URL_CAST_FROM_STRING
        QT_NO_NARROWING_CONVERSIONS_IN_CONNECT
        QT_NO_FOREACH)
endfunction()
