"""DB-API exceptions shaped like pyodbc's: ``args == (sqlstate, message)``, the message in the ODBC driver's format."""

from __future__ import annotations

_DRIVER = "[Microsoft][ODBC Driver 18 for SQL Server][SQL Server]"


class Warning(Exception):
    pass


class Error(Exception):
    """Base class; ``sqlstate`` and ``number`` (SQL Server message number, 0 for driver errors) are set."""

    sqlstate: str = "HY000"
    number: int = 0


class InterfaceError(Error):
    pass


class DatabaseError(Error):
    pass


class DataError(DatabaseError):
    pass


class OperationalError(DatabaseError):
    pass


class IntegrityError(DatabaseError):
    pass


class InternalError(DatabaseError):
    pass


class ProgrammingError(DatabaseError):
    pass


class NotSupportedError(DatabaseError):
    pass


class UnmodelledStatementError(NotSupportedError):
    """A statement the model does not answer (not one of ``cdckit.dialect.sqlserver.queries``)."""


def server_error(cls: type[Error], sqlstate: str, number: int, message: str) -> Error:
    """An error as pyodbc raises it for a SQL Server message, e.g. ``[42S02] [...][SQL Server]Invalid ... (208)``."""
    error = cls(sqlstate, f"[{sqlstate}] {_DRIVER}{message} ({number}) (SQLExecDirectW)")
    error.sqlstate = sqlstate
    error.number = number
    return error


def invalid_object(name: str) -> Error:
    return server_error(ProgrammingError, "42S02", 208, f"Invalid object name '{name}'.")


def invalid_column(name: str) -> Error:
    return server_error(ProgrammingError, "42S22", 207, f"Invalid column name '{name}'.")


def insufficient_arguments() -> Error:
    """What ``cdc.fn_cdc_get_all_changes_<instance>`` raises for an LSN range outside the instance's validity."""
    return server_error(ProgrammingError, "42000", 313,
                        "An insufficient number of arguments were supplied for the procedure or function "
                        "cdc.fn_cdc_get_all_changes_ ... .")


def driver_error(cls: type[Error], sqlstate: str, message: str) -> Error:
    """An error the ODBC driver or driver manager reports (no server message number): ``(sqlstate, message)``."""
    error = cls(sqlstate, message)
    error.sqlstate = sqlstate
    return error


def pyodbc_error(cls: type[Error], message: str, sqlstate: str = "HY000") -> Error:
    """An error pyodbc raises itself (its RaiseErrorV): the arguments are ``(message, sqlstate)``, in that order,
    e.g. ``('ODBC SQL type -155 is not yet supported.  column-index=0  type=-155', 'HY106')``."""
    error = cls(message, sqlstate)
    error.sqlstate = sqlstate
    return error
